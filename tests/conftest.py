"""Shared fixtures. Every check draws fresh random inputs: `fresh_seed` is new per test run
(BITWISE_SEED=<n> replays one) and is printed, so a failure can be reproduced."""
import os
import random

import pytest


@pytest.fixture
def fresh_seed(request) -> int:
    seed = int(os.environ.get("BITWISE_SEED", random.SystemRandom().randrange(2**31)))
    print(f"{request.node.nodeid}: seed {seed} (replay with BITWISE_SEED={seed})")
    return seed
