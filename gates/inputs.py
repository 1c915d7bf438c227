"""Inputs for gates: a fresh seed per check (recorded in the gate's result so any run can be
replayed), seeded generators, outputs poisoned before a run (so a kernel that skips a write
shows), and the degenerate shapes every batch sweep must include."""
import random

import torch

BATCH_SIZES = (1, 2, 3, 5, 7, 8, 13, 16, 31, 64, 127, 128)  # 1, primes, powers of two, largest


def fresh_seed() -> int:
    return random.SystemRandom().randrange(2**31)


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def poisoned_like(t: torch.Tensor) -> torch.Tensor:
    """A tensor of t's shape and dtype filled with NaN (integers: -1)."""
    fill = float("nan") if t.dtype.is_floating_point else -1
    return torch.full_like(t, fill)


def non_contiguous(t: torch.Tensor) -> torch.Tensor:
    """The same values through a strided view (every other column of a wider tensor)."""
    wide = torch.stack([t, torch.zeros_like(t)], dim=-1).flatten(-2)
    return wide[..., ::2]
