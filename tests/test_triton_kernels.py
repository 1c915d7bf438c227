"""Logic tests of the Triton kernels (kernels/ops/*_triton.py and their CUDA entries)
on CPU through the Triton interpreter: masking, loop bounds, and what a row's arithmetic may
depend on (batch, tile slot, phase, chunk split). They prove logic, not GPU bits:
benchmarks/gpu_kernel_check.py checks the bits on the device.

Two interpreter facts shape this file. (1) Interpreter mode is fixed when triton is first
imported (tl.sum and friends are @triton.jit functions too), so the checks (check_*) run in a
child pytest with TRITON_INTERPRET=1, started by the one test_ function: the rest of the
suite never sees an interpreted Triton or the variable. (2) The interpreter's tl.dot is
numpy's BLAS matmul, whose bits for a row change with the row's slot in the tile (OpenBLAS
sgemm: 67 of 256 elements of a 16x32 @ 32x16 product differ when the row moves); the
attention and SSM checks swap in a fixed-order dot (each element summed over k in order;
fp32 operands by one fused multiply-add per k, as Triton lowers an "ieee" fp32 dot) so they
test the kernel's logic. Slot independence of the GPU's MMA is the device script's job.
Negative controls: a row-sum BLOCK that follows the row count, and a block_kv that follows
the context length (a split count following C), must fail the same checks.
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from gates.reference.attention import causal_gqa

ROOT = Path(__file__).resolve().parent.parent
BLOCK_KV = 16


def test_kernels_under_the_triton_interpreter(fresh_seed):
    """Runs this module's check_* functions in a child pytest with TRITON_INTERPRET=1."""
    if importlib.util.find_spec("triton") is None:
        pytest.fail("triton is not installed: the Triton kernel checks cannot run; install the test extra "
                    "(pip install -e '.[test]')")
    env = dict(os.environ, TRITON_INTERPRET="1", BITWISE_SEED=str(fresh_seed))
    child = subprocess.run([sys.executable, "-m", "pytest", __file__, "-o", "python_functions=check_*",
                            "-p", "no:cacheprovider", "-q", "-s"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)
    print(child.stdout[-6000:], child.stderr[-2000:])
    assert child.returncode == 0, (f"interpreter checks failed (replay: BITWISE_SEED={fresh_seed}):\n"
                                   f"{child.stdout[-8000:]}\n{child.stderr[-2000:]}")


def _import_kernel(name):
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.fail("check_* functions run under TRITON_INTERPRET=1 (test_kernels_under_the_triton_interpreter)")
    return importlib.import_module(f"kernels.ops.{name}")


def _fixed_order_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    """d + [M, K] @ [K, N] in d's dtype, every product added to the accumulator in k order,
    as the GPU's MMA steps add k-chunks into the running accumulator (so a K loop's BLOCK_K
    does not regroup the sum: linear_cuda's table changes BLOCK_K with M)."""
    from triton.runtime.interpreter import TensorHandle, _interpreter
    acc_dtype = d.data.dtype
    a_data, b_data = a.data.astype(acc_dtype), b.data.astype(acc_dtype)
    out = d.data.copy()
    # fp32 operands: Triton lowers the dot to one fused multiply-add per k (no MMA); else MMA steps
    fused = a.data.dtype == np.float32 and b.data.dtype == np.float32 and acc_dtype == np.float32
    for k in range(a_data.shape[-1]):
        if fused:
            out = _interpreter.fma_fp32(*np.broadcast_arrays(a_data[:, k, None], b_data[None, k, :], out))
        else:
            out += a_data[:, k, None] * b_data[None, k, :]
    return TensorHandle(out, d.dtype.scalar)


@pytest.fixture(scope="module")
def reduction():
    return _import_kernel("reduction_triton")


def _with_fixed_order_dot(name):
    """The kernel module, with the interpreter's tl.dot replaced by _fixed_order_dot meanwhile."""
    module = _import_kernel(name)
    from triton.runtime.interpreter import InterpreterBuilder
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(InterpreterBuilder, "create_dot", _fixed_order_dot)
        yield module


@pytest.fixture(scope="module")
def attention():
    yield from _with_fixed_order_dot("attention_triton")


@pytest.fixture(scope="module")
def linear_cuda():
    yield from _with_fixed_order_dot("linear_cuda")


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16))  # bf16 is broken in the interpreter
def check_gemm_rows_do_not_follow_m_or_the_tile_table(linear_cuda, dtype, fresh_seed):
    """linear.consistent's CUDA entry: row i of every M (the launch table moves the tile with
    M: 16/64/128/256 rows, BLOCK_K 128 or 64; fp32 its own tiles) equals row i of M = 300;
    leading dims flatten into rows; a K that is not a multiple of any tile is masked."""
    gen = torch.Generator().manual_seed(fresh_seed)
    x = torch.randn(300, 200, generator=gen).to(dtype)
    w = (torch.randn(48, 200, generator=gen) / 8).to(dtype)
    largest = linear_cuda.forward(x, w)
    assert len({linear_cuda._launch(m, 48, 200, dtype, x.device) for m in (1, 5, 16, 40, 100, 257, 300)}) > 1
    for m in (1, 5, 16, 40, 100, 257):
        assert_bitwise_equal(linear_cuda.forward(x[:m], w), largest[:m], f"M={m} {dtype} seed={fresh_seed}")
    shaped = linear_cuda.forward(x[:40].reshape(2, 20, 200), w)
    assert_bitwise_equal(shaped.reshape(40, 48), largest[:40], f"leading dims {dtype} seed={fresh_seed}")
    error = (largest.double() - x.double() @ w.double().T).abs().max()
    assert error <= (1e-4 if dtype == torch.float32 else 2e-2), f"error {error} vs float64, seed={fresh_seed}"
    with pytest.raises(ValueError, match="x is"):
        linear_cuda.forward(x, w.to(torch.float64))
    # fp32 out (a layout's K-leaf partials): the same accumulator unrounded, row-invariant too,
    # and a K slice read in place (strided rows) gives the bits of a contiguous copy
    unrounded = linear_cuda.forward(x, w, torch.float32)
    assert_bitwise_equal(unrounded.to(dtype), largest, f"fp32 out rounded once {dtype} seed={fresh_seed}")
    for m in (1, 40, 257):
        assert_bitwise_equal(linear_cuda.forward(x[:m], w, torch.float32), unrounded[:m], f"fp32 out M={m}")
    leaf = linear_cuda.forward(x[:40, 128:192], w[:, 128:192], torch.float32)
    assert_bitwise_equal(leaf, linear_cuda.forward(x[:40, 128:192].contiguous(), w[:, 128:192].contiguous(),
                                                   torch.float32), f"strided K leaf {dtype} seed={fresh_seed}")
    # negative control: a K split whose count follows M (2 slices for small M) moves the bits;
    # shown in fp32, where a 1-ulp change of the accumulator is not hidden by rounding to fp16
    x32, w32 = x[:64].float(), w.float()
    split = linear_cuda.linear_triton.consistent(x32, w32, config=(16, 64, 4, 3), num_splits=2, block_k=32)
    assert first_bit_difference(split, linear_cuda.forward(x32, w32)) is not None, \
        f"split-K control did not differ, seed={fresh_seed}"


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16))
def check_gemm_tuned_table_moves_the_load_path_not_the_bits(linear_cuda, dtype, fresh_seed, tmp_path, monkeypatch):
    """A tuned launch table (kernels/ops/gemm_tuning.py) for the shape: TMA loads, a persistent
    grid walking several tiles a program, and pointer loads by M bucket, give each row the bits
    of the built-in table; a shape the table does not list takes its default rows, with the same
    bits; an operand the copy engine cannot address falls back to pointer loads.
    fp32 operands keep their own tiles: only half precision reads the tuned table."""
    from kernels.ops import gemm_tuning
    gen = torch.Generator().manual_seed(fresh_seed)
    x = torch.randn(300, 200, generator=gen).to(dtype)
    w = (torch.randn(48, 200, generator=gen) / 8).to(dtype)
    default = linear_cuda.forward(x, w)
    rows = [[4, "persistent", [16, 16, 4, 2], 256], [40, "tma", [32, 16, 4, 2], 64],
            [None, "pointer", [64, 32, 4, 2], 32]]
    other = w[:32]  # a shape the table does not list: its default rows
    other_default = linear_cuda.forward(x, other)
    (tmp_path / "table.json").write_text(json.dumps({"device": "interpreter", "shapes": {"48x200": rows},
                                                     "default": [[None, "tma", [16, 16, 4, 2], 128]]}))
    monkeypatch.setenv(gemm_tuning.ENV, str(tmp_path / "table.json"))
    used = {linear_cuda._launch(m, 48, 200, dtype, x.device)[0] for m in (3, 30, 300)}
    assert used == ({"pointer"} if dtype == torch.float32 else {"persistent", "tma", "pointer"}), used
    for m in (3, 30, 300):
        assert_bitwise_equal(linear_cuda.forward(x[:m], w), default[:m], f"tuned M={m} {dtype} seed={fresh_seed}")
    if dtype != torch.float32:
        assert linear_cuda._launch(30, 32, 200, dtype, x.device) == ("tma", (16, 16, 4, 2), 128)
    assert_bitwise_equal(linear_cuda.forward(x, other), other_default, f"default rows {dtype} seed={fresh_seed}")
    # rows at an odd element offset: no tensor map can address them; the bucket's tile, pointer loads
    shifted = torch.cat([x[:30, :1], x[:30]], dim=1)[:, 1:]
    assert not linear_cuda.linear_triton.tma_ready(shifted, w)
    assert_bitwise_equal(linear_cuda.forward(shifted, w), default[:30], f"unaligned {dtype} seed={fresh_seed}")


@pytest.fixture(scope="module")
def moe_cuda():
    yield from _with_fixed_order_dot("moe_cuda")


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16))
def check_grouped_experts_equal_the_per_expert_loop(moe_cuda, linear_cuda, dtype, fresh_seed):
    """moe.experts_consistent's CUDA entry (two grouped GEMMs for all experts) gives the bits
    of the per-expert loop of linear.consistent, an expert nobody chose included; a token's
    rows do not follow the batch although the tile height does (16 rows at 7 tokens, 128 at
    300)."""
    from kernels.ops.moe import _relu2_once, _routing_groups, experts_loop
    gen = torch.Generator().manual_seed(fresh_seed)
    tokens, hidden, inner, num_experts, top_k = 300, 64, 48, 6, 2
    x = torch.randn(tokens, hidden, generator=gen).to(dtype)
    up = (torch.randn(num_experts, inner, hidden, generator=gen) / 8).to(dtype)
    down = (torch.randn(num_experts, hidden, inner, generator=gen) / 8).to(dtype)
    ids = torch.rand(tokens, num_experts - 1, generator=gen).topk(top_k, dim=-1).indices  # expert 5: no rows
    got = moe_cuda.experts(x, ids, up, down, _relu2_once)
    expected = experts_loop(x, ids, up, down, linear_cuda.forward)
    assert_bitwise_equal(got, expected, f"grouped vs loop {dtype} seed={fresh_seed}")
    assert moe_cuda._block_m(7 * top_k, num_experts) != moe_cuda._block_m(tokens * top_k, num_experts)
    assert_bitwise_equal(moe_cuda.experts(x[:7], ids[:7], up, down, _relu2_once), got[:7],
                         f"7 tokens vs {tokens} {dtype} seed={fresh_seed}")
    if dtype == torch.float32:  # the backward (per expert, torch matmuls) against float64 autograd
        leaves = [t.clone().requires_grad_() for t in (x, up, down)]
        weight = torch.randn(got.shape, generator=gen)
        (moe_cuda.experts(*leaves[:1], ids, *leaves[1:], _relu2_once) * weight).sum().backward()
        wide = [t.double().requires_grad_() for t in (x, up, down)]
        reference = x.double().new_empty(got.shape)
        for expert, (rows, slots) in _routing_groups(ids, num_experts).items():
            h = torch.relu(wide[0][rows] @ wide[1][expert].T) ** 2
            reference[rows, slots] = h @ wide[2][expert].T
        (reference * weight.double()).sum().backward()
        for name, ours, theirs in zip(("x", "up", "down"), leaves, wide):
            error = ((ours.grad.double() - theirs.grad).abs().max() / theirs.grad.abs().max()).item()
            assert error < 1e-5, f"grad {name}: relative error {error:.2e} (tolerance 1e-5), seed={fresh_seed}"


def check_grouped_fast_experts_match_the_loop(moe_cuda, fresh_seed):
    """The fast contract's grouped experts (torch._grouped_mm) compute experts_fast's
    arithmetic: within bf16 rounding of the per-expert loop (a fast path: no bit claim)."""
    from kernels.ops import moe
    gen = torch.Generator().manual_seed(fresh_seed)
    x = torch.randn(50, 64, generator=gen).to(torch.bfloat16)
    up = (torch.randn(6, 48, 64, generator=gen) / 8).to(torch.bfloat16)
    down = (torch.randn(6, 64, 48, generator=gen) / 8).to(torch.bfloat16)
    ids = torch.rand(50, 5, generator=gen).topk(2, dim=-1).indices
    weights = torch.rand(50, 2, generator=gen)
    got, loop = moe_cuda.experts_fast(x, ids, weights, up, down), moe.experts_fast_loop(x, ids, weights, up, down)
    error = ((got.float() - loop.float()).abs().max() / loop.float().abs().max()).item()
    assert error < 2e-2, f"grouped fast experts: relative error {error:.2e} vs the loop, seed={fresh_seed}"


LENGTHS = (1, 200, 1000, 3000, 9000)  # one per BLOCK_TABLE entry, with ragged tails


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16))  # bf16 is broken in the interpreter
def check_scaled_rows_have_torch_division_bits(dtype, fresh_seed):
    """logprob_triton.scale_rows (`scaled` on CUDA outside autograd) gives the bits of torch's
    x.float() / t[:, None] over a vocabulary that is not a multiple of BLOCK, with signed
    zeros, subnormals (fp32 quotients over a huge temperature, fp16 logits) and temperatures
    that round; a division by (1 + ulp) instead is
    caught (negative control)."""
    module = _import_kernel("logprob_triton")
    gen = torch.Generator().manual_seed(fresh_seed)
    rows, vocab = 3, module.BLOCK + 37
    x = (torch.randn(rows, vocab, generator=gen) * 8).to(dtype)
    x[:, :4] = torch.tensor([0.0, -0.0, 1e-7, -6e-8]).to(dtype)  # signed zeros, fp16 subnormals
    t = torch.tensor([0.7, 1.3, 3e37 if dtype == torch.float32 else 0.3])
    ours, torchs = module.scale_rows(x, t), x.float() / t[:, None]
    assert_bitwise_equal(ours, torchs, f"{dtype} seed={fresh_seed}")
    assert torch.signbit(ours[:, 1]).all() and (ours[:, 0] == 0).all() and not torch.signbit(ours[:, 0]).any()
    subnormal = (ours != 0) & (ours.abs() < torch.finfo(torch.float32).tiny) if dtype == torch.float32 else \
        (x != 0) & (x.abs() < torch.finfo(dtype).tiny)  # half: subnormal logits widened
    assert subnormal.any(), f"no subnormal occurred ({dtype})"
    off = x.float() / (t * (1 + torch.finfo(torch.float32).eps))[:, None]
    assert first_bit_difference(ours, off) is not None


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


def _sequence(seed, length, num_q_heads=4, num_kv_heads=2, head_dim=32, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(length, heads, head_dim, generator=generator).to(dtype)
            for heads in (num_q_heads, num_kv_heads, num_kv_heads)]


def _call(module, q, k, v, start, block_kv=BLOCK_KV):
    out = module.consistent(q, k, v, start, scale=q.shape[-1] ** -0.5, block_kv=block_kv)
    assert bool(torch.isfinite(out).all()), "non-finite output: a row was not written or saw garbage"
    return out


def _decode_rows(module, q, k, v, block_kv_of=lambda context: BLOCK_KV):
    """Every token decoded alone over the context up to it."""
    return torch.cat([_call(module, q[p:p + 1], k[:p + 1], v[:p + 1], p, block_kv_of(p + 1))
                      for p in range(q.shape[0])])


def _chunked(module, q, k, v, splits):
    bounds = [0, *splits, q.shape[0]]
    return torch.cat([_call(module, q[lo:hi], k[:hi], v[:hi], lo) for lo, hi in zip(bounds[:-1], bounds[1:])])


DTYPES = (torch.float32, torch.float16)  # bf16 is broken in the interpreter


@pytest.mark.parametrize("dtype", DTYPES)
def check_decode_equals_prefill(attention, dtype, fresh_seed):
    q, k, v = _sequence(fresh_seed, 41, dtype=dtype)
    full = _call(attention, q, k, v, 0)
    assert_bitwise_equal(_decode_rows(attention, q, k, v), full, f"decode vs prefill {dtype} seed={fresh_seed}")
    # the store may hold more than the step needs: later keys (NaN here) are never loaded
    poisoned_k, poisoned_v = k.clone(), v.clone()
    poisoned_k[30:], poisoned_v[30:] = float("nan"), float("nan")
    row = _call(attention, q[29:30], poisoned_k, poisoned_v, 29)
    assert_bitwise_equal(row, full[29:30], f"decode over a longer store seed={fresh_seed}")


@pytest.mark.parametrize("dtype", DTYPES)
def check_chunked_prefill_equals_prefill(attention, dtype, fresh_seed):
    q, k, v = _sequence(fresh_seed, 41, dtype=dtype)
    full = _call(attention, q, k, v, 0)
    split_rng = np.random.default_rng(fresh_seed)
    random_splits = sorted(split_rng.choice(np.arange(1, 41), size=3, replace=False).tolist())
    # splits off multiples of 8 tokens (BLOCK_M / G) put tiles across key-block bounds: rows
    # of those tiles walk blocks that are fully masked for them
    for splits in ([1], [5], [16], [17], [40], [3, 19, 20], random_splits):
        assert_bitwise_equal(_chunked(attention, q, k, v, splits), full,
                             f"chunks split at {splits} {dtype} seed={fresh_seed}")


def check_trainer_full_pass_equals_engine_and_backward_is_deterministic(attention, fresh_seed):
    q, k, v = _sequence(fresh_seed, 37)
    engine = torch.cat([_chunked(attention, q[:20], k[:20], v[:20], [7]),
                        _decode_rows(attention, q, k, v)[20:]])  # prefill in 2 chunks, then decode
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    trainer = attention.consistent_autograd(*leaves, 0, scale=32 ** -0.5, block_kv=BLOCK_KV)
    assert_bitwise_equal(trainer.detach(), engine, f"trainer vs engine seed={fresh_seed}")
    grad_out = torch.randn(trainer.shape, generator=torch.Generator().manual_seed(fresh_seed + 1))
    grads = torch.autograd.grad(trainer, leaves, grad_out)
    again = torch.autograd.grad(attention.consistent_autograd(*leaves, 0, scale=32 ** -0.5, block_kv=BLOCK_KV),
                                leaves, grad_out)
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref_grads = torch.autograd.grad(causal_gqa(*ref_leaves, 0, scale=32 ** -0.5), ref_leaves, grad_out.double())
    for name, grad, repeat, ref in zip("qkv", grads, again, ref_grads):
        assert_bitwise_equal(grad, repeat, f"d{name} run to run seed={fresh_seed}")
        relative = float((grad.double() - ref).norm() / ref.norm())
        print(f"d{name}: relative error vs float64 = {relative:.2e} (tolerance 1e-5)")
        assert relative < 1e-5, f"d{name} relative error {relative} seed={fresh_seed}"


def check_batch_and_tile_slot_invariance(attention, fresh_seed):
    """A row's bits do not follow its tile slot, its tile mates or the batch it rides in."""
    q, k, v = _sequence(fresh_seed, 40)
    full = _call(attention, q, k, v, 0)
    for offset in (1, 3, 6):  # chunks from other first tokens put each row in another slot
        rows = _call(attention, q[offset:offset + 12], k[:offset + 12], v[:offset + 12], offset)
        assert_bitwise_equal(rows, full[offset:offset + 12], f"slot shift {offset} seed={fresh_seed}")
    others = _sequence(fresh_seed + 1, 40)  # other sequences in the batch, at other positions
    starts = torch.tensor([39, 17, 0, 25])
    batch_q = torch.stack([q[39:40], others[0][17:18], q[0:1], q[25:26]])  # [B, 1, Hq, D]
    batch_k = torch.stack([k, others[1], k, k])  # [B, C, Hkv, D] padded to C = 40
    batch_v = torch.stack([v, others[2], v, v])
    out = attention.consistent_batched(batch_q, batch_k, batch_v, starts, scale=32 ** -0.5, block_kv=BLOCK_KV)
    for b, pos in ((0, 39), (2, 0), (3, 25)):
        assert_bitwise_equal(out[b], full[pos:pos + 1], f"batched decode, seq {b} at {pos} seed={fresh_seed}")
    qkv = torch.cat([q.reshape(40, -1), k.reshape(40, -1), v.reshape(40, -1)], dim=1)  # a fused projection
    q_view, k_view, v_view = qkv[:, :128].view(40, 4, 32), qkv[:, 128:192].view(40, 2, 32), qkv[:, 192:].view(40, 2, 32)
    assert not q_view.is_contiguous()
    assert_bitwise_equal(_call(attention, q_view, k_view, v_view, 0), full, f"strided views seed={fresh_seed}")


@pytest.mark.parametrize("num_q_heads, num_kv_heads, head_dim", [(4, 4, 16), (4, 1, 16), (6, 2, 24), (16, 1, 16)])
def check_gqa_groups_are_phase_consistent(attention, num_q_heads, num_kv_heads, head_dim, fresh_seed):
    """Groups of 1, 4, 3 (a token's rows straddle tiles) and 16 (one token fills a tile);
    head dims that are not powers of two are padded."""
    q, k, v = _sequence(fresh_seed, 23, num_q_heads, num_kv_heads, head_dim)
    full = _call(attention, q, k, v, 0)
    assert_bitwise_equal(_decode_rows(attention, q, k, v), full, f"GQA decode seed={fresh_seed}")
    assert_bitwise_equal(_chunked(attention, q, k, v, [5, 6]), full, f"GQA chunks seed={fresh_seed}")


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.float16, 4e-3)])
def check_matches_float64_reference(attention, dtype, tolerance, fresh_seed):
    q, k, v = _sequence(fresh_seed, 45, 6, 2, 32, dtype)
    for start in (0, 30):
        out = _call(attention, q[start:], k, v, start)
        assert out.dtype == dtype
        error = float((out.double() - causal_gqa(q[start:], k, v, start, scale=32 ** -0.5)).abs().max())
        print(f"{dtype} start {start}: max abs error vs float64 = {error:.2e} (tolerance {tolerance:.0e})")
        assert error < tolerance, f"{dtype} start {start}: error {error} seed={fresh_seed}"


def check_negative_control_block_kv_following_context(attention, fresh_seed):
    """block_kv picked from the context length (two splits of whatever context the step
    reads, as a fixed split count would) moves the block bounds between phases: decode and
    chunked prefill then differ from prefill."""
    q, k, v = _sequence(fresh_seed, 41)
    by_context = lambda context: max(16, 1 << (-(-context // 2) - 1).bit_length())  # noqa: E731
    full = _call(attention, q, k, v, 0, by_context(41))
    decode = _decode_rows(attention, q, k, v, by_context)
    assert first_bit_difference(decode, full) is not None, f"control decode did not differ, seed={fresh_seed}"
    chunked = torch.cat([_call(attention, q[:20], k[:20], v[:20], 0, by_context(20)), full[20:]])
    assert first_bit_difference(chunked, full) is not None, f"control chunks did not differ, seed={fresh_seed}"


def _paged_step(pieces, dtype, kv_format="auto", fresh_seed=0):
    """A paged cache holding each sequence's first `start` positions, then one forward's
    segments [(seq_id, start, length, case)] written through write_segments. Returns
    (q rows of the step, {seq: (q, k, v) of the whole sequence}, paged batch)."""
    from kernels.engine.cache import PagedKVCache
    from kernels.models.batch import Segment
    cache = PagedKVCache(num_layers=1, num_blocks=24, block_size=8, num_kv_heads=2, head_dim=32,
                         dtype=dtype, kv_format=kv_format)
    layer, sequences, segments, row = cache.kv(0), {}, [], 0
    for n, (seq_id, start, length, case) in enumerate(pieces):
        q, k, v = _sequence(fresh_seed + n, start + length, dtype=dtype)
        sequences[seq_id] = (q, k, v)
        cache.reserve(seq_id, start + length + 5)
        if start:
            layer.write(Segment(seq_id, 0, start, 0, "engine_prefill"), k[:start], v[:start])
        segments.append(Segment(seq_id, start, length, row, case))
        row += length
    segments = tuple(segments)
    step = [torch.cat([sequences[s.seq_id][i][s.start:s.start + s.length] for s in segments]) for i in range(3)]
    layer.write_segments(segments, step[1], step[2])
    return step[0], sequences, segments, layer.paged(segments)


# decodes at block bounds and inside blocks, a prefill chunk from 0 and one from the middle
MIXED_STEP = ((3, 22, 1, "engine_decode"), (7, 0, 13, "engine_prefill"), (1, 8, 1, "engine_decode"),
              (5, 9, 6, "engine_prefill"), (2, 31, 1, "engine_decode"))


@pytest.mark.parametrize("dtype", DTYPES)
def check_paged_launch_equals_each_sequence_alone(attention, dtype, fresh_seed):
    """consistent_paged: one launch over every segment of a step, K/V read from the pool
    through block tables (non-contiguous, shuffled blocks), gives each sequence the bits
    of the contiguous kernel on that sequence alone."""
    q, sequences, segments, paged = _paged_step(MIXED_STEP, dtype, fresh_seed=fresh_seed)
    # the free list hands out blocks in order; interleaving the reservations shuffles the pages
    assert paged.tables.block_table.shape == (5, 5)
    out = attention.consistent_paged(q, paged, scale=32 ** -0.5, block_kv=BLOCK_KV)
    for segment in segments:
        sq, sk, sv = sequences[segment.seq_id]
        end = segment.start + segment.length
        alone = _call(attention, sq[segment.start:end], sk[:end], sv[:end], segment.start)
        assert_bitwise_equal(out[segment.rows], alone, f"paged {segment} {dtype} seed={fresh_seed}")


def check_paged_fp8_pool_reads_as_kv_decode(attention, fresh_seed):
    """An FP8 pool: the kernel's dequantisation (e4m3 -> fp32 -> dtype) gives the bits of
    attention over kv_decode's copies."""
    from kernels.ops.quant_regions import kv_round_trip
    q, sequences, segments, paged = _paged_step(MIXED_STEP[:3], torch.float16, "fp8", fresh_seed)
    assert paged.key_pool.dtype == torch.float8_e4m3fn
    out = attention.consistent_paged(q, paged, scale=32 ** -0.5, block_kv=BLOCK_KV)
    for segment in segments:
        sq, sk, sv = sequences[segment.seq_id]
        end = segment.start + segment.length
        alone = _call(attention, sq[segment.start:end], kv_round_trip(sk[:end], "fp8"),
                      kv_round_trip(sv[:end], "fp8"), segment.start)
        assert_bitwise_equal(out[segment.rows], alone, f"fp8 paged {segment} seed={fresh_seed}")


def check_split_kv_paged_is_attention_and_follows_the_context(attention, fresh_seed):
    """The fast flash-decoding kernel: within fp32 rounding of the float64 reference; its
    split count follows the context, so its bits differ from the consistent walk's."""
    q, sequences, segments, paged = _paged_step(MIXED_STEP, torch.float32, fresh_seed=fresh_seed)
    fast = attention.split_kv_paged(q, paged, scale=32 ** -0.5, block_kv=16, tokens_per_split=8, max_splits=4)
    for segment in segments:
        sq, sk, sv = sequences[segment.seq_id]
        end = segment.start + segment.length
        exact = causal_gqa(sq[segment.start:end], sk[:end], sv[:end], segment.start, scale=32 ** -0.5)
        error = float((fast[segment.rows].double() - exact).abs().max())
        assert error < 1e-5, f"split-KV {segment}: error {error} vs float64, seed={fresh_seed}"
    consistent = attention.consistent_paged(q, paged, scale=32 ** -0.5, block_kv=16)
    assert first_bit_difference(fast, consistent) is not None, f"split-KV bits equal the walk's, seed={fresh_seed}"


@pytest.fixture(scope="module")
def fused():
    return {name: _import_kernel(name) for name in ("norm_triton", "rope_triton", "activation_triton")}


@pytest.mark.parametrize("dtype", DTYPES)
def check_fused_norm_rows_do_not_follow_the_batch(fused, dtype, fresh_seed):
    """RMSNorm (+ residual): a row alone, in batches and as a strided 3D view gives the
    bits of the same row in the largest batch; close to float64; the fast variant (norm
    reads the unrounded sum) differs in bits where the residual sum rounds."""
    from gates.reference.norm import rmsnorm
    norm = fused["norm_triton"]
    gen = torch.Generator().manual_seed(fresh_seed)
    x, res = (torch.randn(37, 300, generator=gen).to(dtype) for _ in range(2))
    w = (1 + 0.1 * torch.randn(300, generator=gen)).to(dtype)
    for residual in (None, res):
        whole, h_whole = norm.consistent(x, w, eps=1e-6, residual=residual)
        for lo, hi in ((0, 1), (5, 6), (3, 20), (36, 37)):
            part, h_part = norm.consistent(x[lo:hi], w, eps=1e-6, residual=None if residual is None else res[lo:hi])
            assert_bitwise_equal(part, whole[lo:hi],
                                 f"rows {lo}:{hi} residual={residual is not None} seed={fresh_seed}")
            if residual is not None:
                assert_bitwise_equal(h_part, h_whole[lo:hi], f"residual stream {lo}:{hi} seed={fresh_seed}")
        exact, _ = rmsnorm(x, w, eps=1e-6, residual=residual)
        error = float((whole.double() - exact).abs().max())
        assert error < (1e-5 if dtype == torch.float32 else 8e-3), f"error {error} seed={fresh_seed}"
    strided = torch.cat([x, res], dim=1).reshape(37, 2, 300)  # rows [t, 0] are x: a [T, H, D]-style view
    view_out, _ = norm.consistent(strided[:, :1, :], w, eps=1e-6)
    assert_bitwise_equal(view_out[:, 0], norm.consistent(x, w, eps=1e-6)[0], f"strided view seed={fresh_seed}")
    fast_out, fast_h = norm.fast_fused(x, w, eps=1e-6, residual=res)
    consistent_out, consistent_h = norm.consistent(x, w, eps=1e-6, residual=res)
    assert_bitwise_equal(fast_h, consistent_h, f"both keep the rounded residual stream seed={fresh_seed}")
    if dtype != torch.float32:  # in fp32 the sum is the same rounded or not
        assert first_bit_difference(fast_out, consistent_out) is not None, f"fast == consistent seed={fresh_seed}"


def check_fused_norm_gradients_match_float64(fused, fresh_seed):
    from gates.reference.norm import rmsnorm
    norm = fused["norm_triton"]
    gen = torch.Generator().manual_seed(fresh_seed)
    leaves = [torch.randn(9, 64, generator=gen).requires_grad_(),
              (1 + 0.1 * torch.randn(64, generator=gen)).requires_grad_(),
              torch.randn(9, 64, generator=gen).requires_grad_()]
    out, h = norm.consistent(leaves[0], leaves[1], eps=1e-6, residual=leaves[2])
    grad_out, grad_h = torch.randn(9, 64, generator=gen), torch.randn(9, 64, generator=gen)
    grads = torch.autograd.grad([out, h], leaves, [grad_out, grad_h])
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref_out, ref_h = rmsnorm(ref_leaves[0], ref_leaves[1], eps=1e-6, residual=ref_leaves[2])
    ref_grads = torch.autograd.grad([ref_out, ref_h], ref_leaves, [grad_out.double(), grad_h.double()])
    for name, grad, ref in zip(("x", "w", "residual"), grads, ref_grads):
        relative = float((grad.double() - ref).norm() / ref.norm())
        print(f"norm d{name}: relative error vs float64 = {relative:.2e} (tolerance 1e-5)")
        assert relative < 1e-5, f"d{name} relative error {relative} seed={fresh_seed}"


@pytest.mark.parametrize("dtype", DTYPES)
def check_fused_rope_and_silu_rows_do_not_follow_the_batch(fused, dtype, fresh_seed):
    """RoPE from the table and SiLU*up: a token alone equals the same token in the batch,
    a strided q view equals its copy; both within rounding of float64; the fast RoPE (angles
    computed per call, products rounded) differs from the table's bits."""
    from gates.reference.activation import silu_mul
    from gates.reference.rope import rope as rope_reference
    from kernels.ops.rope import _fp32_table
    rope, act = fused["rope_triton"], fused["activation_triton"]
    gen = torch.Generator().manual_seed(fresh_seed)
    qkv = torch.randn(23, 6 * 32, generator=gen).to(dtype)
    q, k = qkv[:, :128].view(23, 4, 32), qkv[:, 128:].view(23, 2, 32)
    positions = torch.randint(0, 500, (23,), generator=gen)
    cos, sin = _fp32_table(1e6, 32, 512)
    whole_q, whole_k = rope.consistent(q, k, positions, cos, sin)
    for lo, hi in ((0, 1), (7, 8), (2, 15)):
        part_q, part_k = rope.consistent(q[lo:hi], k[lo:hi], positions[lo:hi], cos, sin)
        assert_bitwise_equal(part_q, whole_q[lo:hi], f"rope q {lo}:{hi} seed={fresh_seed}")
        assert_bitwise_equal(part_k, whole_k[lo:hi], f"rope k {lo}:{hi} seed={fresh_seed}")
    assert_bitwise_equal(rope.consistent(q.contiguous(), k, positions, cos, sin)[0], whole_q, "strided q")
    exact = rope_reference(q, positions, theta=1e6)
    tolerance = 1e-5 if dtype == torch.float32 else 4e-3
    assert float((whole_q.double() - exact).abs().max()) < tolerance, f"rope error seed={fresh_seed}"
    fast_q, _ = rope.fast(q, k, positions, 1e6)
    assert float((fast_q.double() - exact).abs().max()) < 64 * tolerance, f"fast rope error seed={fresh_seed}"
    assert first_bit_difference(fast_q, whole_q) is not None, f"fast rope == table rope seed={fresh_seed}"
    gate, up = (torch.randn(19, 100, generator=gen).to(dtype) for _ in range(2))
    whole = act.consistent(gate, up)
    for lo, hi in ((0, 1), (4, 11)):
        assert_bitwise_equal(act.consistent(gate[lo:hi], up[lo:hi]), whole[lo:hi], f"silu rows {lo}:{hi}")
    error = float((whole.double() - silu_mul(gate, up)).abs().max())
    assert error < (1e-5 if dtype == torch.float32 else 8e-3), f"silu error {error} seed={fresh_seed}"
    fast = act.fast(gate, up)
    if dtype != torch.float32:
        assert first_bit_difference(fast, whole) is not None, f"fast silu == consistent seed={fresh_seed}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [32, 128])
def check_qk_norm_rope_is_the_three_launches(fused, dtype, head_dim, fresh_seed):
    """The fused q/k norm + RoPE gives the bits of norm(q), norm(k), then rope, for both
    contracts' arithmetic (the table, the angles from theta), q and k read through the fused
    qkv's strides; the normed rows it also stores are norm's output."""
    from kernels.ops.rope import _fp32_table
    norm, rope = fused["norm_triton"], fused["rope_triton"]
    kernel = _import_kernel("qk_norm_rope_triton")
    gen = torch.Generator().manual_seed(fresh_seed)
    tokens, q_heads, k_heads = 21, 4, 2
    qkv = torch.randn(tokens, (q_heads + 2 * k_heads) * head_dim, generator=gen).to(dtype)
    q = qkv[:, :q_heads * head_dim].view(tokens, q_heads, head_dim)
    k = qkv[:, q_heads * head_dim:(q_heads + k_heads) * head_dim].view(tokens, k_heads, head_dim)
    q_w, k_w = ((1 + 0.1 * torch.randn(head_dim, generator=gen)).to(dtype) for _ in range(2))
    positions = torch.randint(0, 500, (tokens,), generator=gen)
    cos, sin = _fp32_table(1e6, head_dim, 512)
    q_normed, k_normed = norm.launch(q, q_w, 1e-6)[0], norm.launch(k, k_w, 1e-6)[0]
    for tables, theta in (({"cos_table": cos, "sin_table": sin}, 0.0), ({}, 1e6)):
        expected = (q_normed, k_normed, *rope.launch(q_normed, k_normed, positions, theta=theta, **tables))
        got = kernel.launch(q, k, q_w, k_w, positions, eps=1e-6, theta=theta, **tables)
        for name, a, b in zip(("normed q", "normed k", "rotated q", "rotated k"), got, expected):
            assert_bitwise_equal(a, b, f"{name}, table={bool(tables)} D={head_dim} seed={fresh_seed}")
    moved = kernel.launch(q, k, q_w, k_w, positions, eps=1e-2, cos_table=cos, sin_table=sin)  # control: eps
    assert first_bit_difference(moved[2], got[2]) is not None, f"the check cannot see the norm seed={fresh_seed}"


@pytest.mark.parametrize("dtype", DTYPES)
def check_kv_write_is_the_two_scatters(dtype, fresh_seed):
    """The one-launch K/V write lands every row where `pool[slots] = rows` puts it, v read
    through the fused qkv's row stride; slots nobody wrote keep their NaN; a layout it does
    not take (a head stride that is not D) is refused with nothing written."""
    kernel = _import_kernel("kv_write_triton")
    gen = torch.Generator().manual_seed(fresh_seed)
    rows, heads, dim = 37, 2, 48  # 37 rows: tiles of 32 rows (4096 // 128) leave one partial
    qkv = torch.randn(rows, 5 * heads * dim, generator=gen).to(dtype)
    k = torch.randn(rows, heads, dim, generator=gen).to(dtype)
    v = qkv[:, 3 * heads * dim:4 * heads * dim].view(rows, heads, dim)
    slots = torch.randperm(100, generator=gen)[:rows]
    pools = [torch.full((100, heads, dim), float("nan"), dtype=dtype) for _ in range(2)]
    expected = [p.clone() for p in pools]
    expected[0][slots], expected[1][slots] = k, v
    assert kernel.scatter(pools[0], pools[1], slots, k, v)
    assert_bitwise_equal(pools[0], expected[0], f"keys seed={fresh_seed}")
    assert_bitwise_equal(pools[1], expected[1], f"values seed={fresh_seed}")
    untouched = [p.clone() for p in pools]
    assert not kernel.scatter(pools[0], pools[1], slots, k.transpose(1, 2).contiguous().transpose(1, 2), v)
    assert_bitwise_equal(pools[0], untouched[0], "a refused layout wrote nothing")


def check_gumbel_argmax_is_the_formula_and_ignores_the_batch(fresh_seed):
    """The consistent sampler's fused draw: each row's token scores the maximum of the torch
    formula x - log(-log u) over race_uniforms (within an ulp: the logs are numpy's here),
    dropped (-inf) tokens are never drawn, a row alone draws what it draws in a batch, and the
    chunk size (programs per row) never moves the token; a row with every token dropped draws 0."""
    kernel = _import_kernel("sampler_triton")
    from kernels.ops.sampler import mix_seed, race_uniforms
    gen = torch.Generator().manual_seed(fresh_seed)
    x = 3 * torch.randn(12, 2500, generator=gen)  # 2500: three blocks, the last one partial
    x[:, ::3] = float("-inf")  # as top-k/top-p drop tokens
    keys = torch.tensor([mix_seed(fresh_seed, i) for i in range(12)], dtype=torch.int64)
    drawn = kernel.gumbel_argmax(x, keys)
    scores = x.double() - torch.log(-torch.log(race_uniforms(keys, 2500).double()))
    best = scores.max(dim=-1).values
    chosen = scores.gather(1, drawn[:, None])[:, 0]
    assert bool((drawn % 3 != 0).all()), f"a dropped token was drawn, seed={fresh_seed}"
    assert float((best - chosen).abs().max()) <= 1e-5 * float(best.abs().max()), f"seed={fresh_seed}"
    for row in (0, 5, 11):
        assert int(kernel.gumbel_argmax(x[row:row + 1], keys[row:row + 1])) == int(drawn[row]), f"row {row}"
    for chunk in (1024, 2048):  # 3 and 2 chunks a row: the merge pass decides
        assert torch.equal(kernel.gumbel_argmax(x, keys, chunk=chunk), drawn), f"chunk {chunk}, seed={fresh_seed}"
    dropped = torch.full((2, 2500), float("-inf"))
    assert kernel.gumbel_argmax(dropped, keys[:2], chunk=1024).tolist() == [0, 0]


def check_gumbel_argmax_greedy_rows_are_torch_argmax(fresh_seed):
    """Greedy rows in the draw's launch take torch.argmax's token, ties to the lowest id (the
    ties are planted and proved present); the other rows draw what they draw without the
    greedy mask; a kernel that adds noise to greedy rows is caught (negative control)."""
    kernel = _import_kernel("sampler_triton")
    from kernels.ops.sampler import mix_seed
    gen = torch.Generator().manual_seed(fresh_seed)
    x = torch.randn(8, 2500, generator=gen)
    for row in range(0, 8, 2):  # a tie for the maximum in a later block and chunk than the first
        best = int(x[row].argmax())
        x[row, (best + 1500) % 2500] = x[row, best]
    ties = [int((x[row] == x[row].max()).sum()) for row in range(8)]
    assert all(ties[row] >= 2 for row in range(0, 8, 2)), f"no tie planted: {ties}"
    keys = torch.tensor([mix_seed(fresh_seed, i) for i in range(8)], dtype=torch.int64)
    greedy = torch.arange(8) % 2 == 0
    drawn = kernel.gumbel_argmax(x, keys, greedy, chunk=1024)
    assert torch.equal(drawn[greedy], x[greedy].argmax(dim=-1)), f"seed={fresh_seed}"
    assert torch.equal(drawn[~greedy], kernel.gumbel_argmax(x, keys, chunk=1024)[~greedy]), f"seed={fresh_seed}"
    noisy = kernel.gumbel_argmax(x, keys, torch.zeros(8, dtype=torch.bool), chunk=1024)
    assert not torch.equal(noisy[greedy], x[greedy].argmax(dim=-1)), f"noise on greedy rows passed, seed={fresh_seed}"


@pytest.fixture(scope="module")
def ssm_triton():
    yield from _with_fixed_order_dot("ssm_scan_triton")


SSM = dict(heads=4, head_dim=16, groups=2, state=16, chunk=16, length=70)  # 70: four boundaries, ends mid-chunk


def _ssm_inputs(seed):
    g, s = torch.Generator().manual_seed(seed), SSM
    return {"x": torch.randn(s["length"], s["heads"], s["head_dim"], generator=g),
            "B": torch.randn(s["length"], s["groups"], s["state"], generator=g),
            "C": torch.randn(s["length"], s["groups"], s["state"], generator=g),
            "dt_raw": torch.randn(s["length"], s["heads"], generator=g),
            "dt_bias": torch.randn(s["heads"], generator=g) * 0.5 - 1.0,
            "A_log": torch.rand(s["heads"], generator=g).log1p(), "D": torch.randn(s["heads"], generator=g)}


def _ssm_run(inputs, splits, scans):
    """The sequence in segments of `splits` rows, segment i scanned by scans[i] (a backend
    of ssm_scan.consistent_with), the state carried: every row's y."""
    from kernels.models.mamba_state import MambaSequenceState
    from kernels.ops import ssm_scan
    s = SSM
    state = MambaSequenceState(conv=torch.zeros(1, 1), ssm=torch.zeros(s["heads"], s["head_dim"], s["state"]))
    outputs, start = [], 0  # the inputs may be autograd leaves: slices keep their gradients
    for length, scan in zip(splits, scans):
        rows = slice(start, start + length)
        outputs.append(ssm_scan.consistent_with(scan, inputs["x"][rows], inputs["B"][rows], inputs["C"][rows],
                                                inputs["dt_raw"][rows], state, inputs["dt_bias"], inputs["A_log"],
                                                inputs["D"], chunk_size=s["chunk"]))
        start += length
    return torch.cat(outputs)


def check_ssm_scan_phases_agree_bitwise(ssm_triton, fresh_seed):
    """The CUDA scan: one prefill == chunked prefill split before, at and after chunk boundaries
    == prefill then one-token decodes, every row bit for bit; and the float64 recurrence within
    1e-4 of max |y| (printed)."""
    inputs, length = _ssm_inputs(fresh_seed), SSM["length"]
    scan = ssm_triton.consistent
    whole = _ssm_run(inputs, [length], [scan])
    for pieces in ([5, 11, 16, 17, 21], [16, 16, 38], [3, 37]):  # decodes from row 40 cross two boundaries
        splits = pieces + [1] * (length - sum(pieces))
        assert_bitwise_equal(_ssm_run(inputs, splits, [scan] * len(splits)), whole,
                             f"splits {pieces}, seed={fresh_seed}")
    from gates.reference import ssm as reference
    exact = reference.scan(inputs["x"], inputs["B"], inputs["C"], inputs["dt_raw"], inputs["dt_bias"],
                           inputs["A_log"], inputs["D"])
    error = float((whole.double() - exact).abs().max() / exact.abs().max())
    print(f"ssm scan (Triton) vs float64 recurrence: max |error| / max |y| = {error:.2e}")
    assert error < 1e-4, f"error {error} seed={fresh_seed}"


def check_ssm_scan_negative_control_mixed_arithmetic(ssm_triton, fresh_seed):
    """The phase check sees a decode computed by another arithmetic of the same scan (the torch
    form after a Triton prefill): the two agree to ~1e-6, not bit for bit."""
    from kernels.ops import ssm_scan
    inputs, length = _ssm_inputs(fresh_seed), SSM["length"]
    whole = _ssm_run(inputs, [length], [ssm_triton.consistent])
    mixed = _ssm_run(inputs, [60] + [1] * (length - 60),
                     [ssm_triton.consistent] + [ssm_scan.torch_scan] * (length - 60))
    assert first_bit_difference(mixed[60:], whole[60:]) is not None, f"control did not differ, seed={fresh_seed}"


def check_ssm_scan_backward_is_the_torch_forms(ssm_triton, fresh_seed):
    """The trainer's gradients through the Triton scan are the torch form's, bit for bit (its
    backward recomputes that form), and the forward keeps the Triton bits."""
    from kernels.ops import ssm_scan
    inputs = _ssm_inputs(fresh_seed)
    leaves = {k: v.clone().requires_grad_(True) for k, v in inputs.items()}
    grads, ys = [], []
    for scan in (ssm_triton.consistent, ssm_scan.torch_scan):
        y = _ssm_run(leaves, [SSM["length"]], [scan])
        weight = torch.randn(y.shape, generator=torch.Generator().manual_seed(fresh_seed))
        grads.append(torch.autograd.grad((y * weight).sum(), list(leaves.values())))
        ys.append(y.detach())
    for name, ours, torch_form in zip(leaves, *grads):
        assert_bitwise_equal(ours, torch_form, f"d/d{name} seed={fresh_seed}")
    assert_bitwise_equal(ys[0], _ssm_run(inputs, [SSM["length"]], [ssm_triton.consistent]), "forward bits")


def _conv_run(conv_segment, xbc, weight, bias, splits):
    """The conv of xbc's rows in segments of `splits` by conv_segment (ssm_conv_triton.consistent
    or the torch form ssm_conv.consistent_segment), the state carried: every row's output."""
    from kernels.models.mamba_state import MambaSequenceState
    state = MambaSequenceState(conv=torch.zeros(weight.shape[1] - 1, xbc.shape[1], dtype=xbc.dtype),
                               ssm=torch.zeros(1))
    outputs, start = [], 0
    for length in splits:
        outputs.append(conv_segment(xbc[start:start + length], state, weight, bias))
        start += length
    return torch.cat(outputs)


def check_ssm_conv_phases_agree_and_match_the_torch_form(fresh_seed):
    """The CUDA conv: prefill == chunked prefill (pieces shorter than the state, too) ==
    one-token decodes, bit for bit; rows read from a wider projection in place; the torch
    form within 1e-6 (printed); its gradients are the torch form's."""
    kernel = _import_kernel("ssm_conv_triton")
    from kernels.ops import ssm_conv
    g = torch.Generator().manual_seed(fresh_seed)
    projected = torch.randn(24, 300 + 7, generator=g)
    xbc, weight, bias = projected[:, 7:], torch.randn(300, 4, generator=g) * 0.5, torch.randn(300, generator=g) * 0.1
    whole = _conv_run(kernel.consistent, xbc, weight, bias, [24])
    for pieces in ([2, 1, 5, 10], [3]):
        splits = pieces + [1] * (24 - sum(pieces))
        assert_bitwise_equal(_conv_run(kernel.consistent, xbc, weight, bias, splits), whole,
                             f"splits {pieces} seed={fresh_seed}")
    torch_form = _conv_run(ssm_conv.consistent_segment, xbc, weight, bias, [24])
    error = float((whole - torch_form).abs().max() / torch_form.abs().max())
    print(f"ssm conv (Triton) vs the torch form: max |error| / max |y| = {error:.2e}")
    assert error < 1e-6, f"error {error} seed={fresh_seed}"
    leaves = [t.clone().requires_grad_(True) for t in (xbc, weight, bias)]
    weight_out = torch.randn(24, 300, generator=g)
    grads = [torch.autograd.grad((_conv_run(form, *leaves, [24]) * weight_out).sum(), leaves)
             for form in (kernel.consistent, ssm_conv.consistent_segment)]
    for name, ours, torch_grad in zip(("xbc", "weight", "bias"), *grads):
        assert_bitwise_equal(ours, torch_grad, f"d/d{name} seed={fresh_seed}")


def _pooled_store(conv_dim, kernel_size, dtype):
    from kernels.models.mamba_pool import PooledMambaStore
    s = SSM
    return PooledMambaStore(conv_rows=kernel_size - 1, conv_dim=conv_dim, num_heads=s["heads"],
                            head_dim=s["head_dim"], state_size=s["state"], num_groups=s["groups"],
                            chunk_size=s["chunk"], dtype=dtype)


def check_ssm_scan_batched_decode_is_the_segment_bits(ssm_triton, fresh_seed):
    """The engine's batched decode (every sequence's new row written into the store's row pool
    after its buffered rows, the kernels run once over all): each sequence's rows equal its
    run alone through one-segment calls, bit for bit, with histories that leave 0, 1, Q-2
    and Q-1 rows buffered (the last one completes its chunk at the first decode and folds it);
    the states after the decodes are equal too. The first 3 decodes run as a decode graph runs
    them (kernels/engine/mamba_tables.py): tables served from static tensors, two padding rows
    on the store's scratch slot, the positions advanced afterwards as the doors recorded;
    sequences 3 and 2 complete their chunks there, the others in the plain decodes after.
    The row kernels launched in P-blocks, their loops unrolled, reading 2 values at a time
    instead of 4, give the same bits. Negative
    control: a sequence's slot of the state pool doubled changes its rows, and only its rows
    (an ulp decays away in the chunk)."""
    from kernels.models.batch import Segment
    from kernels.ops import ssm_scan
    s = SSM
    histories = [s["chunk"], 17, 2 * s["chunk"] - 2, s["chunk"] - 1, 5]
    decodes = 16  # crosses a chunk boundary for every sequence
    sequences = [_ssm_inputs(fresh_seed + i) for i in range(len(histories))]
    shared = {k: sequences[0][k] for k in ("dt_bias", "A_log", "D")}
    alone = [_ssm_run({**inputs, **shared}, [h] + [1] * decodes, [ssm_triton.consistent] * (decodes + 1))
             for inputs, h in zip(sequences, histories)]

    def batched(disturb=None, steps=decodes, served_steps=0):
        store = _pooled_store(8, 4, torch.float32)
        store.reserve(len(histories))
        rows = {seq: [] for seq in range(len(histories))}
        for seq, (inputs, h) in enumerate(zip(sequences, histories)):  # each prefilled alone
            segment = (Segment(seq, 0, h, 0, "engine_prefill"),)
            rows[seq].append(ssm_scan.each_segment(
                lambda *a, **k: ssm_scan.consistent_with(ssm_triton.consistent, *a, **k), segment, store,
                tuple(inputs[key][:h] for key in ("x", "B", "C", "dt_raw")), shared["dt_bias"], shared["A_log"],
                shared["D"], chunk_size=s["chunk"]))
        if disturb is not None:
            slot = store.held(disturb).slot
            store.ssm[slot] = 2 * store.ssm[slot]
        for t in range(steps):
            segments = tuple(Segment(seq, h + t, 1, seq, "engine_decode") for seq, h in enumerate(histories))
            new = [torch.cat([inputs[key][h + t:h + t + 1] for inputs, h in zip(sequences, histories)])
                   for key in ("x", "B", "C", "dt_raw")]
            if t < served_steps:
                y = _served_decode(store, segments, new, shared, s["chunk"], fresh_seed + t)
            else:
                y = ssm_scan._consistent_decode_batch(*new, segments, store, shared["dt_bias"], shared["A_log"],
                                                      shared["D"], chunk_size=s["chunk"], dt_min=0.0)
            for seq in rows:
                rows[seq].append(y[seq:seq + 1])
        return [torch.cat(parts) for _, parts in sorted(rows.items())], store

    together, store = batched(served_steps=3)
    for seq, h in enumerate(histories):
        assert_bitwise_equal(together[seq], alone[seq], f"sequence {seq} (history {h}) seed={fresh_seed}")
        state = store.held(seq)
        assert state.position == h + decodes and state.buffered == (h + decodes) % s["chunk"]
    disturbed, _ = batched(disturb=2, steps=3)
    assert first_bit_difference(disturbed[2][histories[2]:],
                                alone[2][histories[2]:histories[2] + 3]) is not None, "control"
    for seq in (0, 1, 3, 4):
        assert_bitwise_equal(disturbed[seq], alone[seq][:histories[seq] + 3], f"undisturbed sequence {seq}")
    ssm_decode = _import_kernel("ssm_decode_triton")
    launch = dict(ssm_decode.DECODE_ROW_LAUNCH)
    assert launch["vector"] == 4 and launch["p_block"] >= s["head_dim"]  # so the P-blocked run below differs
    # the row's chains in 4 programs of 2 warps, loops unrolled, read 2 values at a time
    ssm_decode.DECODE_ROW_LAUNCH.update(p_block=s["head_dim"] // 4, unroll=4, num_warps=2, vector=2)
    try:
        split, _ = batched(steps=4)
    finally:
        ssm_decode.DECODE_ROW_LAUNCH.update(launch)
    for seq, h in enumerate(histories):
        assert_bitwise_equal(split[seq], alone[seq][:h + 4], f"P-blocked decode, sequence {seq}")


def _served_decode(store, segments, new, shared, chunk_size, seed):
    """One batched decode as a CUDA graph runs it, through kernels/engine/mamba_tables.py: the
    tables served to the padded segments (two padding rows of random inputs, on the scratch
    slot), then filled with the real rows' slots and buffered counts; the positions advanced
    afterwards as the door recorded."""
    from contextlib import ExitStack

    from kernels.engine.mamba_tables import MambaTables
    from kernels.models.batch import Segment
    from kernels.ops import ssm_scan
    size = len(segments) + 2
    tables = MambaTables(lambda: [store], size, "cpu")
    padded = segments + tuple(Segment(-1 - i, 0, 1, len(segments) + i, "engine_graph") for i in range(2))
    g = torch.Generator().manual_seed(seed)
    rows = [torch.cat([t, torch.randn(2, *t.shape[1:], generator=g)]) for t in new]
    with ExitStack() as serving:
        tables.serve(padded, size, serving)
        assert tables.fill(segments, size, [True])
        y = ssm_scan._consistent_decode_batch(*rows, padded, store, shared["dt_bias"], shared["A_log"],
                                              shared["D"], chunk_size=chunk_size, dt_min=0.0)
    assert tables.recorded_advances() == [True], "the consistent decode buffers its row"
    tables.advance(segments, tables.recorded_advances())
    return y[:len(segments)]


def check_ssm_conv_batched_decode_is_the_segment_bits(fresh_seed):
    """The engine's batched conv decode (one launch, each row after its slot's K-1 rows of the
    conv pool, the pool moved on in place) equals each sequence's one-row calls, bit for bit,
    outputs and conv rows; a row read from a wider projection in place. Negative control: two
    sequences' slots swapped give each the other's outputs."""
    kernel = _import_kernel("ssm_conv_triton")
    from kernels.models.batch import Segment
    g = torch.Generator().manual_seed(fresh_seed)
    weight, bias = torch.randn(300, 4, generator=g) * 0.5, torch.randn(300, generator=g) * 0.1
    lengths, decodes = [1, 2, 3, 9], 6
    streams = [torch.randn(n + decodes, 300 + 7, generator=g)[:, 7:] for n in lengths]
    alone = [_conv_run(kernel.consistent, xbc, weight, bias, [n] + [1] * decodes) for xbc, n in zip(streams, lengths)]

    def batched(swap=False):
        store = _pooled_store(300, 4, torch.float32)
        outputs = {seq: [] for seq in range(len(lengths))}
        for seq, (xbc, n) in enumerate(zip(streams, lengths)):
            outputs[seq].append(kernel.consistent(xbc[:n], store.open(Segment(seq, 0, n, 0, "engine_prefill")),
                                                  weight, bias))
            store.held(seq).folded = n  # the positions a scan would have moved on (conv moves none)
        for t in range(decodes):
            segments = tuple(Segment(seq, n + t, 1, seq, "engine_decode") for seq, n in enumerate(lengths))
            slots = store.decode_slots(segments)
            if swap:
                slots = slots[[1, 0, 2, 3]]
            rows = torch.cat([xbc[n + t:n + t + 1] for xbc, n in zip(streams, lengths)])
            out = kernel.decode_batch(rows, slots, store.conv, weight, bias)
            store.advance(segments, buffered=False)
            for seq in outputs:
                outputs[seq].append(out[seq:seq + 1])
        return [torch.cat(parts) for _, parts in sorted(outputs.items())], store

    together, store = batched()
    for seq, (xbc, n) in enumerate(zip(streams, lengths)):
        assert_bitwise_equal(together[seq], alone[seq], f"sequence {seq} (prompt {n}) seed={fresh_seed}")
        assert_bitwise_equal(store.conv[store.held(seq).slot], xbc[n + decodes - 3:n + decodes], f"conv rows {seq}")
    swapped, _ = batched(swap=True)
    assert first_bit_difference(swapped[0][lengths[0]:], alone[0][lengths[0]:]) is not None, "control"


def check_ssm_scan_fast_prefill_folds_every_row(ssm_triton, fresh_seed):
    """The fast contract's CUDA prefill (fold_all: chunks from the call's row 0, the last partial
    chunk folded through zero-dt padding): every row's y and the state after all rows within
    1e-5 of the torch form's run_chunks (printed); it claims no bits."""
    from kernels.ops import ssm_scan
    inputs, s = _ssm_inputs(fresh_seed), SSM
    dt = torch.nn.functional.softplus(inputs["dt_raw"] + inputs["dt_bias"])
    rows, A = [inputs["x"], inputs["B"], inputs["C"], dt], -torch.exp(inputs["A_log"])
    state0 = torch.randn(s["heads"], s["head_dim"], s["state"], generator=torch.Generator().manual_seed(fresh_seed))
    y, end = ssm_triton.fold_all(rows, state0, A, inputs["D"], chunk_size=s["chunk"], first_row=3)
    y_torch, _, end_torch = ssm_scan.run_chunks(rows, state0, A, inputs["D"], s["chunk"])
    errors = [float((a - b).abs().max() / b.abs().max()) for a, b in ((y, y_torch[3:]), (end, end_torch))]
    print(f"fast prefill (Triton) vs torch form: y {errors[0]:.2e}, end state {errors[1]:.2e}")
    assert y.shape == y_torch[3:].shape and max(errors) < 1e-5, (errors, fresh_seed)


def check_fast_state_update_is_the_recurrence(fresh_seed):
    """The fast decode's one-pass kernel (kernels/ops/ssm_update_triton.py) against the torch
    recurrence it replaces: outputs and the state written back in place at each sequence's
    slot, other slots untouched (a fast path: close to the torch form, not its bits)."""
    kernel = _import_kernel("ssm_update_triton")
    generator = torch.Generator().manual_seed(fresh_seed)
    count, heads, groups, P, N, pool = 3, 4, 2, 20, 12, 6  # P and N off the blocks: masks tested
    ssm = torch.randn(pool, heads, P, N, generator=generator)
    slots = torch.tensor([4, 0, 2])
    x = torch.randn(count, heads, P, generator=generator).to(torch.bfloat16)
    BC = torch.randn(count, 2 * groups, N, generator=generator).to(torch.bfloat16)  # B and C: one projection
    B, C = BC[:, :groups], BC[:, groups:]
    dt = torch.rand(count, heads, generator=generator) * 0.5
    A, D = -torch.rand(heads, generator=generator) - 0.1, torch.randn(heads, generator=generator)
    bh, ch = (t.float().repeat_interleave(heads // groups, dim=1) for t in (B, C))
    want_state = (torch.exp(dt * A)[:, :, None, None] * ssm[slots]
                  + (dt[:, :, None] * x.float())[..., None] * bh[:, :, None, :])
    want_y = (want_state * ch[:, :, None, :]).sum(-1) + D[:, None] * x.float()
    before = ssm.clone()
    y = kernel.state_update(ssm, slots, x, B, C, dt, A, D)
    error = max((y - want_y).abs().max().item(), (ssm[slots] - want_state).abs().max().item())
    print(f"fast state update: max |error| {error:.2e} (tolerance 1e-5)")
    assert error < 1e-5
    untouched = [s for s in range(pool) if s not in slots.tolist()]
    assert_bitwise_equal(ssm[untouched], before[untouched], "slots no sequence holds")
