"""DeepSeek-V4's interleaved partial RoPE (kernels/ops/rope_interleaved/): a row's consistent bits
are the same alone and among other positions, within a float64 tolerance of the definition, the
leading channels untouched bit for bit; the inverse undoes the rotation (to the tolerance); the fast
form stays near float64 and differs from the consistent one in its last bits (its bf16 cos/sin)."""
import torch

from gates.compare import first_bit_difference
from gates.inputs import fresh_seed
from gates.reference.rope import rope_interleaved
from kernels.ops.rope_interleaved import VARIANTS

consistent, fast = VARIANTS["consistent"], VARIANTS["fast"]

ROWS, HEADS, DIM, ROPE_DIM, THETA, MAX_POSITION = 23, 3, 32, 8, 10000.0, 4096
TOLERANCE = 1e-2  # relative to max |x|: one bf16 rounding


def _inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(ROWS, HEADS, DIM, generator=gen).to(torch.bfloat16)
    return x, torch.randint(0, MAX_POSITION, (ROWS,), generator=gen)


def _rope(variant, x, positions, inverse=False):
    return variant(x, positions, theta=THETA, max_position=MAX_POSITION, rope_dim=ROPE_DIM, inverse=inverse)


def test_consistent_rows_ignore_their_neighbours_and_match_float64():
    seed = fresh_seed()
    x, positions = _inputs(seed)
    whole = _rope(consistent, x, positions)
    for row in (0, 7, ROWS - 1):
        assert first_bit_difference(_rope(consistent, x[row:row + 1], positions[row:row + 1])[0], whole[row]) is None
    assert first_bit_difference(whole[..., :-ROPE_DIM], x[..., :-ROPE_DIM]) is None
    for inverse in (False, True):
        got = _rope(consistent, x, positions, inverse)
        error = float((got.double() - rope_interleaved(x, positions, theta=THETA, rope_dim=ROPE_DIM,
                                                       inverse=inverse)).abs().max() / x.double().abs().max())
        print(f"seed {seed}: consistent (inverse={inverse}) vs float64 {error:.2e} (tolerance {TOLERANCE:g})")
        assert error <= TOLERANCE
    back = _rope(consistent, whole, positions, inverse=True)
    assert float((back.double() - x.double()).abs().max() / x.double().abs().max()) <= 2 * TOLERANCE


def test_fast_is_near_float64_and_not_the_consistent_bits():
    seed = fresh_seed()
    x, positions = _inputs(seed)
    got = _rope(fast, x, positions)
    error = float((got.double() - rope_interleaved(x, positions, theta=THETA, rope_dim=ROPE_DIM)).abs().max()
                  / x.double().abs().max())
    print(f"seed {seed}: fast vs float64 {error:.2e}")
    assert error <= 2 * TOLERANCE
    assert first_bit_difference(got, _rope(consistent, x, positions)) is not None
