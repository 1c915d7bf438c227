"""Batch invariance of every consistent row op (linear, norm, rope, activation, logprob), with
the fast variants as negative controls.

Each row of a consistent op, computed inside batches of every size in SIZES (the batch tiled
from row 0, then again shifted so rows land at other positions) and inside the reversed
largest batch, must equal bit for bit the same row computed inside the largest batch; strided
views of the input must give the contiguous input's bits. The sampler's batch invariance is
tests/ops/test_sampler.py's. Run with `python -m pytest tests/ops/test_batch_invariance.py -s`
to see the negative-control counts.
"""
import pytest
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from kernels.ops import activation
from kernels.ops.activation.consistent import consistent as activation_consistent
from kernels.ops.linear.consistent import consistent as linear_consistent
from kernels.ops.linear.fast import fast as linear_fast
from kernels.ops.logprob.consistent import consistent as logprob_consistent
from kernels.ops.norm.consistent import consistent as norm_consistent
from kernels.ops.rope.consistent import consistent as rope_consistent

SIZES = (1, 2, 3, 5, 7, 8, 13, 16, 31, 64, 127, 128, 257)
LARGEST = max(SIZES)
DTYPES = (torch.float32, torch.bfloat16)
# Above torch's GRAIN_SIZE (32768): a reduction over one row this long is split across
# threads, as it is for a real vocabulary (Qwen3: 151936).
VOCAB = 40_000


def _randn(generator, shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(shape, generator=generator) * scale).to(dtype)


def _tensors(result):
    """An op's output as a tuple of tensors (norm returns (y, residual or None))."""
    return tuple(t for t in (result if isinstance(result, tuple) else (result,)) if t is not None)


def _row_slices(num_rows, size, shift):
    """Slices of `size` rows covering [0, num_rows); the first is `shift` long when shift > 0."""
    starts = [0] + list(range(shift or size, num_rows, size))
    return [slice(lo, min(hi, num_rows)) for lo, hi in zip(starts, starts[1:] + [num_rows])]


def assert_batch_invariant(op, row_inputs, what):
    """op(*row_inputs) over the largest batch is the reference; each row recomputed in batches
    of every size (tiled from row 0 and shifted) and in the reversed batch must keep its bits."""
    reference = _tensors(op(*row_inputs))
    num_rows = row_inputs[0].shape[0]
    for size in SIZES:
        for shift in ([0, (size + 1) // 2] if 1 < size < num_rows else [0]):
            for rows in _row_slices(num_rows, size, shift):
                piece = _tensors(op(*(x[rows] for x in row_inputs)))
                for index, expected in enumerate(reference):
                    assert_bitwise_equal(piece[index], expected[rows], (
                        f"{what}: rows {rows.start}:{rows.stop} as a batch of {rows.stop - rows.start} "
                        f"(tiling by {size}, shift {shift}) vs inside {num_rows}, output {index}"))
    flipped = _tensors(op(*(x.flip(0) for x in row_inputs)))
    for index, expected in enumerate(reference):
        assert_bitwise_equal(flipped[index].flip(0), expected, f"{what}: reversed batch, output {index}")


def _strided_views(x, fresh_seed):
    """Non-contiguous views holding x's values: column-major, and every other column of a wider tensor."""
    wide = torch.randn(x.shape[0], 2 * x.shape[1], generator=torch.Generator().manual_seed(fresh_seed)).to(x.dtype)
    wide[:, ::2] = x
    return {"column-major": x.t().contiguous().t(), "strided slice": wide[:, ::2]}


# (K, N): an odd shape, and the cut models' lm_head, whose rows MKL on an AVX-512 Xeon
# (avx512_bf16) reduces one way at M = 8 and another at M >= 16: padding rows to 8 alone
# failed here on that machine; one GEMM call per 8-row tile passes.
# (48, 2) and (64, 3): DeepSeek-V4's indexer weights and hyper-connection head, whose 2-3 output
# columns took a BLAS path where a row's place in its tile moved its fp32 sums.
LINEAR_SHAPES = ((384, 320), (256, 1024), (48, 2), (64, 3))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k_dim,n_dim", LINEAR_SHAPES)
def test_linear_consistent_is_batch_invariant(dtype, k_dim, n_dim, fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    x, w = _randn(generator, (LARGEST, k_dim), dtype), _randn(generator, (n_dim, k_dim), dtype, 0.05)
    op = lambda rows: linear_consistent(rows, w, row_multiple=8)  # noqa: E731
    assert_batch_invariant(op, (x,), f"linear.consistent {dtype} seed {fresh_seed}")
    for name, view in _strided_views(x, fresh_seed).items():
        assert not view.is_contiguous()
        assert_bitwise_equal(op(view), op(x), f"linear.consistent {dtype} {name} seed {fresh_seed}")
        assert_batch_invariant(op, (view,), f"linear.consistent {dtype} {name} seed {fresh_seed}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("has_residual", [False, True])
def test_norm_consistent_is_batch_invariant(dtype, has_residual, fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    x, w = _randn(generator, (LARGEST, 1024), dtype), 1.0 + _randn(generator, (1024,), dtype, 0.1)
    if has_residual:
        residual = _randn(generator, (LARGEST, 1024), dtype)
        op = lambda rows, res: norm_consistent(rows, w, eps=1e-6, residual=res)  # noqa: E731
        inputs = (x, residual)
    else:
        op, inputs = (lambda rows: norm_consistent(rows, w, eps=1e-6)), (x,)
    assert_batch_invariant(op, inputs, f"norm.consistent {dtype} residual={has_residual} seed {fresh_seed}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_consistent_is_batch_invariant(dtype, fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    q, k = _randn(generator, (LARGEST, 4, 64), dtype), _randn(generator, (LARGEST, 2, 64), dtype)
    positions = torch.randint(0, 4096, (LARGEST,), generator=generator)
    op = lambda q_rows, k_rows, pos: rope_consistent(  # noqa: E731
        q_rows, k_rows, pos, theta=1e6, max_position=4096)
    assert_batch_invariant(op, (q, k, positions), f"rope.consistent {dtype} seed {fresh_seed}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_activation_consistent_is_batch_invariant(dtype, fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    gate_up = _randn(generator, (LARGEST, 2 * 771), dtype, 3.0)  # 771: rows end in a scalar tail
    gate, up = gate_up.chunk(2, dim=-1)  # the model's layout: non-contiguous halves
    contiguous = (gate.contiguous(), up.contiguous())
    assert_batch_invariant(activation_consistent, contiguous, f"activation.consistent {dtype} seed {fresh_seed}")
    gate_views, up_views = _strided_views(contiguous[0], fresh_seed), _strided_views(contiguous[1], fresh_seed + 1)
    views = {"chunked halves": (gate, up), **{name: (gate_views[name], up_views[name]) for name in gate_views}}
    for name, (g, u) in views.items():
        assert not g.is_contiguous()
        assert_bitwise_equal(activation_consistent(g, u), activation_consistent(*contiguous),
                             f"activation.consistent {dtype} {name} vs contiguous, seed {fresh_seed}")
        assert_batch_invariant(activation_consistent, (g, u), f"activation.consistent {dtype} {name} seed {fresh_seed}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("full", [False, True])
def test_logprob_consistent_is_batch_invariant(dtype, full, fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    logits = _randn(generator, (LARGEST, VOCAB), dtype, 3.0)
    targets = torch.randint(0, VOCAB, (LARGEST,), generator=generator)
    temperatures = 0.5 + torch.rand(LARGEST, generator=generator)
    temperatures[::3] = 1.0
    op = lambda x, t, temp: logprob_consistent(x, t, temp, full=full)  # noqa: E731
    assert_batch_invariant(op, (logits, targets, temperatures),
                           f"logprob.consistent {dtype} full={full} V={VOCAB} seed {fresh_seed}")


def test_linear_fast_depends_on_batch_size(fresh_seed):
    """Negative control: the BLAS kernel follows M, so small batches round differently."""
    generator = torch.Generator().manual_seed(fresh_seed)
    x, w = _randn(generator, (LARGEST, 384), scale=1.0), _randn(generator, (320, 384), scale=0.05)
    inside = linear_fast(x, w)
    counts = {}
    for size in (1, 2, 3):
        difference = first_bit_difference(linear_fast(x[:size], w), inside[:size])
        counts[size] = 0 if difference is None else difference.num_differing
    print(f"\nlinear.fast fp32: differing elements by M (of M*320): {counts}")
    assert all(counts.values()), f"linear.fast fp32 should differ for M in 1,2,3: {counts}, seed {fresh_seed}"


@pytest.mark.parametrize("variant, must_differ", [("fast", True), ("consistent", False)])
def test_activation_element_alone_vs_inside_long_tensor(variant, must_differ, fresh_seed):
    """fast: torch's vector loop and scalar tail round SiLU differently (negative control);
    consistent: an element's bits do not depend on where it sits."""
    op = activation.VARIANTS[variant]
    generator = torch.Generator().manual_seed(fresh_seed)
    num_differing, total = 0, 0
    for _ in range(4):
        gate, up = _randn(generator, (1000,), scale=4.0), _randn(generator, (1000,))
        alone = torch.cat([op(gate[i:i + 1], up[i:i + 1]) for i in range(1000)])
        difference = first_bit_difference(alone, op(gate, up))
        num_differing += 0 if difference is None else difference.num_differing
        total += 1000
    print(f"\nactivation.{variant} fp32: {num_differing}/{total} elements differ alone vs inside")
    assert (num_differing > 0) == must_differ, (
        f"activation.{variant} fp32: {num_differing}/{total} differ alone vs inside, seed {fresh_seed}")
