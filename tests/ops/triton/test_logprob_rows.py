"""Logic tests of the fused log-prob kernels (kernels/ops/logprob/rows_triton.py) and of the
consistent variant's CUDA form (logprob/consistent.py: the kernel for the engine, the same kernel
under an autograd Function for the trainer) on CPU through the Triton interpreter: the log-sum-exp
against float64, a row's bits alone and in a batch, the chosen log-prob equal to the torch gather
of the same lse, the trainer's forward equal to the engine's and its gradient against float64,
and the draw scaling raw logits in the kernel giving the tokens of the scaled copy. They prove
logic, not GPU bits: benchmarks/gpu_graph_head.py and the CUDA gates check those on the device.
The checks (check_*) run in a child pytest with TRITON_INTERPRET=1 (tests/ops/triton/interpreter.py).
Negative control: a BLOCK that follows the row count moves a row's bits, and the check sees it.
"""
import pytest
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from tests.ops.triton.interpreter import DTYPES, import_kernel, run_checks

VOCABS = (300, 5000, 20000)  # one ragged step; one chunk of three 2048 steps; three 8192 chunks, the last ragged


def test_logprob_row_kernels_under_the_triton_interpreter(fresh_seed):
    """Runs this module's check_* functions (logprob rows) in a child pytest with TRITON_INTERPRET=1."""
    run_checks(__file__, fresh_seed)


@pytest.fixture(scope="module")
def rows():
    return import_kernel("logprob.rows_triton")


def _inputs(seed, count, vocab, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    logits = (4 * torch.randn(count, vocab, generator=gen)).to(dtype)
    targets = torch.randint(0, vocab, (count,), generator=gen)
    temperatures = 0.5 + torch.rand(count, generator=gen)
    return logits, targets, temperatures


def _order_revealing(seed, count, vocab):
    """Rows whose lse shows any reordering of the sum: one logit at 0, the rest near -12, so S
    is about 1 + 7e-6 V and its last bit, which carries many terms, is a visible part of lse."""
    gen = torch.Generator().manual_seed(seed)
    logits = 0.5 * torch.randn(count, vocab, generator=gen) - 12
    logits[torch.arange(count), torch.randint(0, vocab, (count,), generator=gen)] = 0.0
    return logits


def _float64_logprob(logits, targets, temperatures):
    x = logits.double() / temperatures.double()[:, None]
    lse = torch.logsumexp(x, dim=-1)
    return lse, x.gather(-1, targets[:, None])[:, 0] - lse


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
def check_consistent_rows_match_float64_and_ignore_the_batch(rows, vocab, dtype, fresh_seed):
    """Peaked rows and rows that reveal the summation order (at temperature 1)."""
    logits, targets, temperatures = _inputs(fresh_seed, 6, vocab, dtype)
    logits[3:], temperatures[3:] = _order_revealing(fresh_seed + 1, 3, vocab).to(dtype), 1.0
    lse, logp = rows.consistent_rows(logits, targets, temperatures)
    want_lse, want_logp = _float64_logprob(logits, targets, temperatures)
    error = max(float((lse.double() - want_lse).abs().max()), float((logp.double() - want_logp).abs().max()))
    print(f"V={vocab} {dtype}: max |lse, logp - fp64| = {error:.3e} (tolerance 1e-5 * |lse|)")
    assert error <= 1e-5 * float(want_lse.abs().max()), f"V={vocab} seed={fresh_seed}"
    for first, count in ((0, 1), (2, 1), (1, 3), (5, 1)):
        part = slice(first, first + count)
        alone_lse, alone_logp = rows.consistent_rows(logits[part], targets[part], temperatures[part])
        assert_bitwise_equal(alone_lse, lse[part], f"V={vocab} rows {part} seed={fresh_seed}")
        assert_bitwise_equal(alone_logp, logp[part], f"V={vocab} rows {part} seed={fresh_seed}")
    scaled_lse, _ = rows.consistent_rows(logits.float() / temperatures[:, None])  # already scaled: no division
    assert_bitwise_equal(scaled_lse, lse, f"V={vocab} pre-scaled seed={fresh_seed}")


@pytest.mark.parametrize("vocab", VOCABS)
def check_the_chosen_logprob_is_the_gather_of_the_same_lse(rows, vocab, fresh_seed):
    """logp = x[t] - lse inside the kernel has the bits of torch's gather of scaled x minus the
    kernel's lse: the engine's selective path, its full path and the trainer's agree."""
    logits, targets, temperatures = _inputs(fresh_seed, 5, vocab, torch.float16)
    lse, logp = rows.consistent_rows(logits, targets, temperatures)
    x = logits.float() / temperatures[:, None]
    assert_bitwise_equal(logp, x.gather(-1, targets[:, None])[:, 0] - lse, f"V={vocab} seed={fresh_seed}")


@pytest.mark.parametrize("full", (False, True))
def check_the_trainers_autograd_form_is_the_engines(full, fresh_seed):
    """logprob.consistent's CUDA form (called here on CPU tensors): with a gradient recorded, its
    values are the engine's bits, and its gradient is within 1e-5 of float64 autograd."""
    consistent = import_kernel("logprob.consistent")
    logits, targets, temperatures = _inputs(fresh_seed, 4, 5000)
    engine = consistent._on_cuda(logits, targets, temperatures, full)
    leaf = logits.clone().requires_grad_()
    trainer = consistent._on_cuda(leaf, targets, temperatures, full)
    assert_bitwise_equal(trainer.detach(), engine, f"full={full} seed={fresh_seed}")
    weights = torch.randn(trainer.shape, generator=torch.Generator().manual_seed(fresh_seed + 1))
    (grad,) = torch.autograd.grad((trainer * weights).sum(), leaf)
    exact = logits.double().requires_grad_()
    x = exact / temperatures.double()[:, None]
    reference = torch.log_softmax(x, dim=-1)
    reference = reference if full else reference.gather(-1, targets[:, None])[:, 0]
    (want,) = torch.autograd.grad((reference * weights.double()).sum(), exact)
    error, scale = float((grad.double() - want).abs().max()), float(want.abs().max())
    print(f"full={full}: max |d logits - fp64| = {error:.3e} (tolerance 1e-5 * max |d logits| = {1e-5 * scale:.3e})")
    assert error <= 1e-5 * scale, f"full={full} seed={fresh_seed}: {error}"


@pytest.mark.parametrize("vocab", VOCABS)
def check_fast_rows_match_float64(rows, vocab, fresh_seed):
    logits, targets, temperatures = _inputs(fresh_seed, 6, vocab)
    logp = rows.fast_rows(logits, targets, temperatures)
    _, want = _float64_logprob(logits, targets, temperatures)
    error = float((logp.double() - want).abs().max())
    print(f"V={vocab}: max |fast logp - fp64| = {error:.3e} (tolerance 1e-4)")
    assert error <= 1e-4, f"V={vocab} seed={fresh_seed}"


def check_the_draw_scales_raw_logits_as_the_scaled_copy(fresh_seed):
    """gumbel_argmax given raw half logits and temperatures draws the tokens it draws from
    forms.scaled's fp32 copy (the division in the kernel is the same IEEE one)."""
    sampler = import_kernel("sampler.triton")
    from kernels.ops.sampler.forms import mix_seed
    logits, _, temperatures = _inputs(fresh_seed, 8, 5000, torch.float16)
    keys = torch.tensor([mix_seed(fresh_seed, i) for i in range(8)], dtype=torch.int64)
    greedy = torch.arange(8) % 3 == 0
    want = sampler.gumbel_argmax(logits.float() / temperatures[:, None], keys, greedy)
    assert torch.equal(sampler.gumbel_argmax(logits, keys, greedy, temperatures=temperatures), want), (
        f"seed={fresh_seed}")


def check_consistent_rows_negative_control(rows, fresh_seed):
    """A BLOCK chosen by the number of rows (one row: a small BLOCK) moves a row's bits, and
    the comparison above sees it (11-16 of 16 order-revealing rows move)."""
    logits = _order_revealing(fresh_seed, 16, 20000)
    batch, _ = rows.consistent_rows(logits)
    alone = torch.cat([rows.consistent_rows(logits[i:i + 1], launch=(256, 1))[0] for i in range(16)])
    assert first_bit_difference(batch, alone) is not None, f"control did not differ, seed={fresh_seed}"
