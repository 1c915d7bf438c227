"""Shared fixtures. Every check draws fresh random inputs: `fresh_seed` is new per test run
(BITWISE_SEED=<n> replays one) and is attached to the report of any test that fails."""
import os
import random

import pytest


@pytest.fixture
def fresh_seed(request) -> int:
    seed = int(os.environ.get("BITWISE_SEED", random.SystemRandom().randrange(2**31)))
    request.node.fresh_seed = seed
    return seed


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and hasattr(item, "fresh_seed"):
        report.sections.append(("fresh seed", f"replay with BITWISE_SEED={item.fresh_seed}"))
