"""Logic tests of DeepSeek-V4's consistent CUDA kernels on CPU through the Triton interpreter: the
attention core (kernels/ops/sink_attention/triton.py) and the indexer's block scores
(kernels/ops/block_topk/triton.py). A query's bits must not follow the batch (alone, in slices, in
the whole call), a block's score must not follow how many blocks the phase holds, a masked entry's
content must never reach the output, the trainer's autograd forward must be the engine's bits with
the torch form's gradients, and every figure stays within a float64 tolerance. They prove logic,
not GPU bits: benchmarks/gpu_kernel_check.py checks those on the device.
Negative control: the same checks see a kernel whose block follows the batch (a planted launch).
"""
import pytest
import torch

from gates.compare import first_bit_difference
from gates.reference.block_topk import scores as exact_scores
from gates.reference.sink_attention import attend
from tests.ops.test_sink_attention import HEADS, _laid_out
from tests.ops.triton.interpreter import DTYPES, import_kernel, run_checks

TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3}  # relative to max |out|, vs float64


def test_deepseek_kernels_under_the_triton_interpreter(fresh_seed):
    """Runs this module's check_* functions in a child pytest with TRITON_INTERPRET=1."""
    run_checks(__file__, fresh_seed)


@pytest.fixture(scope="module")
def sink():
    return import_kernel("sink_attention.triton")


@pytest.fixture(scope="module")
def scorer():
    return import_kernel("block_topk.triton")


def _differing_rows(call, *rows) -> int:
    """Rows whose bits differ between call(*rows) and the same rows in slices of 1 and 5."""
    whole = call(*rows)
    moved = set()
    for size in (1, 5):
        for lo in range(0, rows[0].shape[0], size):
            part = call(*(t[lo:lo + size] for t in rows))
            for row in range(part.shape[0]):
                if first_bit_difference(part[row], whole[lo + row]) is not None:
                    moved.add(lo + row)
    return len(moved)


def _attend(module, sinks, block_l=None):
    """The kernel's launch over per-row inputs, or a planted one whose BLOCK_L follows the batch."""
    def call(q, entries, valid):
        if block_l is not None:
            module.BLOCK_L = block_l(q.shape[0])
        try:
            return module.launch(q, entries, valid, sinks, scale=q.shape[-1] ** -0.5)
        finally:
            module.BLOCK_L = 16
    return call


def _attention_inputs(seed, dtype):
    q, entries, valid, sinks = _laid_out(seed, dtype)
    return q[:12], entries[:12], valid[:12], sinks


@pytest.mark.parametrize("dtype", DTYPES)
def check_attention_rows_do_not_follow_the_batch(sink, dtype, fresh_seed):
    q, entries, valid, sinks = _attention_inputs(fresh_seed, dtype)
    assert _differing_rows(_attend(sink, sinks), q, entries, valid) == 0, f"seed={fresh_seed}"
    print(f"sink_attention {dtype}: 0 of {q.shape[0]} rows move")


def check_an_attention_block_that_follows_the_batch_fails(sink, fresh_seed):
    """Negative control of the batch check (fp32: a half output's rounding can hide the move)."""
    q, entries, valid, sinks = _attention_inputs(fresh_seed, torch.float32)
    planted = _differing_rows(_attend(sink, sinks, lambda rows: 8 if rows > 5 else 16), q, entries, valid)
    assert planted > 0, f"a BLOCK_L that follows the batch moved no row: the check is blind (seed={fresh_seed})"
    print(f"sink_attention planted batch-dependent block: {planted} of {q.shape[0]} rows move")


def check_attention_never_reads_a_masked_entry(sink, fresh_seed):
    q, entries, valid, sinks = _attention_inputs(fresh_seed, torch.float32)
    assert bool((~valid).any()), "no masked entry in the inputs: the check would be vacuous"
    garbage = entries.clone()
    garbage[~valid] = 10 * torch.randn(int((~valid).sum()), entries.shape[-1],
                                        generator=torch.Generator().manual_seed(fresh_seed))
    call = _attend(sink, sinks)
    assert first_bit_difference(call(q, garbage, valid), call(q, entries, valid)) is None


@pytest.mark.parametrize("dtype", DTYPES)
def check_attention_is_within_the_float64_reference(sink, dtype, fresh_seed):
    q, entries, valid, sinks = _attention_inputs(fresh_seed, dtype)
    out, reference = _attend(sink, sinks)(q, entries, valid).double(), attend(q, entries, valid, sinks,
                                                                              scale=q.shape[-1] ** -0.5)
    error = float((out - reference).abs().max() / reference.abs().max())
    print(f"sink_attention {dtype}: max error {error:.2e} of max |out| (tolerance {TOLERANCE[dtype]:.0e})")
    assert error <= TOLERANCE[dtype], f"seed={fresh_seed}"


def check_attention_autograd_is_the_engine_s_bits_with_the_torch_form_s_gradients(sink, fresh_seed):
    from kernels.ops.sink_attention.forms import torch_form
    q, entries, valid, sinks = _attention_inputs(fresh_seed, torch.float32)
    leaves = [t.clone().requires_grad_() for t in (q, entries, sinks)]
    out = sink.consistent(leaves[0], leaves[1], valid, leaves[2], scale=q.shape[-1] ** -0.5)
    assert out.grad_fn is not None
    assert first_bit_difference(out.detach(), _attend(sink, sinks)(q, entries, valid)) is None
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(fresh_seed + 1))
    got = torch.autograd.grad(out, leaves, grad)
    twins = [t.clone().requires_grad_() for t in (q, entries, sinks)]
    want = torch.autograd.grad(torch_form(twins[0], twins[1], valid, twins[2], scale=q.shape[-1] ** -0.5), twins, grad)
    for name, g, w in zip(("q", "entries", "sinks"), got, want):
        assert first_bit_difference(g, w) is None, f"d{name}: not the torch form's gradient (seed={fresh_seed})"


def _score_inputs(seed, dtype, tokens=9, blocks=70, dim=24):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(tokens, HEADS, dim, generator=gen).to(dtype)
    keys = torch.randn(blocks, dim, generator=gen).to(dtype)
    return q, keys, torch.randn(tokens, HEADS, generator=gen)


@pytest.mark.parametrize("dtype", DTYPES)
def check_scores_follow_neither_the_batch_nor_the_blocks_held(scorer, dtype, fresh_seed):
    q, keys, weights = _score_inputs(fresh_seed, dtype)
    scale = q.shape[-1] ** -0.5

    def call(q_rows, weight_rows):
        return scorer.score(q_rows, keys, weight_rows, scale=scale)
    assert _differing_rows(call, q, weights) == 0, f"seed={fresh_seed}"
    whole = call(q, weights)
    for held in (1, 31, 32, 33, 69):  # a phase that holds fewer blocks
        assert first_bit_difference(scorer.score(q, keys[:held], weights, scale=scale), whole[:, :held]) is None, \
            f"{held} blocks held (seed={fresh_seed})"
    reference = exact_scores(q, keys, weights, scale=scale)
    error = float((whole.double() - reference).abs().max() / reference.abs().max())
    print(f"block_score {dtype}: {q.shape[0]} tokens, max error {error:.2e} of max |score|")
    assert error <= TOLERANCE[dtype], f"seed={fresh_seed}"


def check_a_score_kernel_that_sums_heads_by_the_batch_fails(scorer, fresh_seed):
    """Negative control of the batch check above: heads summed in reverse when a call holds many
    queries (as a layout picked by the shape would) moves rows."""
    q, keys, weights = _score_inputs(fresh_seed, torch.float32)

    def planted(q_rows, weight_rows):
        if q_rows.shape[0] > 4:
            q_rows, weight_rows = q_rows.flip(1), weight_rows.flip(1)
        return scorer.score(q_rows, keys, weight_rows, scale=q.shape[-1] ** -0.5)
    assert _differing_rows(planted, q, weights) > 0, f"the check is blind (seed={fresh_seed})"
