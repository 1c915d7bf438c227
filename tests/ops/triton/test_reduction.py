"""Logic tests of the row reductions (kernels/ops/reduction_triton.py) on CPU through the Triton
interpreter: masking, loop bounds, and that a row's sum and prefix sums do not depend on the
batch. They prove logic, not GPU bits: benchmarks/gpu_kernel_check.py checks the bits on the
device. The checks (check_*) run in a child pytest with TRITON_INTERPRET=1 (interpreter mode is
fixed when triton is first imported: tests/ops/triton/interpreter.py).
Negative control: a row-sum BLOCK that follows the row count must fail the same checks.
"""
import pytest
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from tests.ops.triton.interpreter import import_kernel, run_checks


def test_reduction_kernels_under_the_triton_interpreter(fresh_seed):
    """Runs this module's check_* functions (reduction) in a child pytest with TRITON_INTERPRET=1."""
    run_checks(__file__, fresh_seed)


@pytest.fixture(scope="module")
def reduction():
    return import_kernel("reduction_triton")


LENGTHS = (1, 200, 1000, 3000, 9000)  # one per BLOCK_TABLE entry, with ragged tails


@pytest.mark.parametrize("length", LENGTHS)
def check_row_sum_is_batch_invariant(reduction, length, fresh_seed):
    x = torch.randn(8, length, generator=torch.Generator().manual_seed(fresh_seed))
    alone = torch.cat([reduction.row_sum(x[i:i + 1]) for i in range(8)])
    for rows in (1, 3, 8):
        for first in range(0, 8 - rows + 1, max(1, rows)):
            batch = reduction.row_sum(x[first:first + rows])
            assert_bitwise_equal(batch, alone[first:first + rows],
                                 f"L={length} rows {first}:{first + rows} seed={fresh_seed}")
    shaped = reduction.row_sum(x.reshape(2, 4, length))  # leading shape [2, 4]
    assert shaped.shape == (2, 4, 1)
    assert_bitwise_equal(shaped.reshape(8, 1), alone, f"L={length} leading shape seed={fresh_seed}")
    strided = reduction.row_sum(x.T.contiguous().T)  # non-contiguous rows
    assert_bitwise_equal(strided, alone, f"L={length} non-contiguous seed={fresh_seed}")


@pytest.mark.parametrize("length", LENGTHS)
def check_row_sum_matches_float64(reduction, length, fresh_seed):
    x = torch.randn(3, length, generator=torch.Generator().manual_seed(fresh_seed))
    got, exact = reduction.row_sum(x).double(), x.double().sum(-1, keepdim=True)
    bound = length * 2.0 ** -24 * x.double().abs().sum(-1, keepdim=True)  # recursive-sum error bound
    error = (got - exact).abs()
    print(f"L={length}: max |row_sum - fp64| = {error.max():.3e}, bound L*2^-24*sum|x| = {bound.min():.3e}")
    assert bool((error <= bound).all()), f"L={length} seed={fresh_seed}: error {error.max()} over {bound.min()}"


@pytest.mark.parametrize("length", (300, 1024, 3000))  # inside one chunk, exactly one, three with a tail
def check_row_prefix_sum_is_the_row_alone_and_never_decreases(reduction, length, fresh_seed):
    """Each row's prefix sums are the same bits alone and in batches of 3 and 8; on
    nonnegative rows they never decrease (the carry is the chunk's last prefix, exactly);
    within the recursive-sum bound of the float64 prefix sums."""
    x = torch.rand(8, length, generator=torch.Generator().manual_seed(fresh_seed))
    alone = torch.cat([reduction.row_prefix_sum(x[i:i + 1]) for i in range(8)])
    for rows in (3, 8):
        assert_bitwise_equal(reduction.row_prefix_sum(x[:rows]), alone[:rows], f"L={length} seed={fresh_seed}")
    assert bool((alone[:, 1:] >= alone[:, :-1]).all()), f"L={length}: a prefix sum decreased, seed={fresh_seed}"
    exact = x.double().cumsum(-1)
    bound = length * 2.0 ** -24 * exact[:, -1:]
    error = (alone.double() - exact).abs().max()
    print(f"L={length}: max |row_prefix_sum - fp64| = {error:.3e}, bound {bound.min():.3e}")
    assert bool(error <= bound.min()), f"L={length} seed={fresh_seed}: error {error}"


def check_row_sum_negative_control(reduction, fresh_seed):
    """A BLOCK chosen by the number of rows (1 row -> small BLOCK, a batch -> large) breaks
    batch invariance, and the check above sees it."""
    x = torch.randn(8, 3000, generator=torch.Generator().manual_seed(fresh_seed))
    alone = torch.cat([reduction.launch(x[i:i + 1], 256, 1)[:, None] for i in range(8)])
    batch = reduction.launch(x, 4096, 8)[:, None]
    assert first_bit_difference(batch, alone) is not None, f"control did not differ, seed={fresh_seed}"
