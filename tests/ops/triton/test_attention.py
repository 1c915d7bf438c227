"""Logic tests of the attention kernels (kernels/ops/attention/triton.py) on CPU through the
Triton interpreter: masking, loop bounds, and what a row's arithmetic may depend on (batch, tile
slot, phase, chunk split, paged block tables). They prove logic, not GPU bits:
benchmarks/gpu_kernel_check.py checks the bits on the device. The checks (check_*) run in a
child pytest with TRITON_INTERPRET=1, with the interpreter's tl.dot (BLAS, whose bits follow a
row's tile slot) swapped for a fixed-order dot: tests/ops/triton/interpreter.py says why.
Negative control: a block_kv that follows the context length (a split count following C) must
fail the same checks.
"""
import numpy as np
import pytest
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from gates.reference.attention import causal_gqa
from tests.ops.triton.interpreter import DTYPES, run_checks, with_fixed_order_dot

BLOCK_KV = 16


def test_attention_kernels_under_the_triton_interpreter(fresh_seed):
    """Runs this module's check_* functions (attention) in a child pytest with TRITON_INTERPRET=1."""
    run_checks(__file__, fresh_seed)


@pytest.fixture(scope="module")
def attention():
    yield from with_fixed_order_dot("attention.triton")


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
    from kernels.ops.quant import kv_round_trip
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
