"""DeepSeek-V4's attention core (kernels/ops/sink_attention/) on a sequence laid out as the model
will: each query's sliding window (ascending), then the compressed blocks the indexer chose
(kernels/ops/block_topk/, position descending), padded to window + top_k. Under the consistent
variant a query's output is the same bits in the whole prompt (two threads) and alone (a decode
step, one thread), in bf16 and fp32, and within a float64 tolerance; the fast decode (split-KV) is
not the fast prefill's bits (negative control, with its size)."""
import pytest
import torch

from gates.case_calls import intra_op_threads
from gates.compare import first_bit_difference
from gates.inputs import fresh_seed
from gates.reference.sink_attention import attend
from kernels.ops.block_topk.consistent import score_consistent, select_consistent
from kernels.ops.sink_attention.consistent import consistent
from kernels.ops.sink_attention.fast import fast, fast_split_kv

TOKENS, HEADS, DIM, WINDOW, RATE, TOP_K = 80, 4, 32, 8, 4, 3
TOLERANCE = {torch.bfloat16: 1e-2, torch.float32: 1e-5}  # relative to max |out|, vs float64


def _laid_out(seed, dtype=torch.bfloat16):
    """(q [T, H, D] bf16, entries [T, WINDOW + TOP_K, D], valid, sinks): every query's own entries."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(TOKENS, HEADS, DIM, generator=gen).to(dtype)
    kv = torch.randn(TOKENS, DIM, generator=gen).to(dtype)
    blocks = torch.randn(TOKENS // RATE, DIM, generator=gen).to(dtype)
    positions = torch.arange(TOKENS)
    scores = score_consistent(q, blocks, torch.randn(TOKENS, HEADS, generator=gen), scale=DIM ** -0.5)
    chosen = select_consistent(scores, positions, top_k=TOP_K, compress_rate=RATE)  # [T, k], -1 padded
    entries = torch.zeros(TOKENS, WINDOW + TOP_K, DIM, dtype=dtype)
    valid = torch.zeros(TOKENS, WINDOW + TOP_K, dtype=torch.bool)
    for t in range(TOKENS):
        window = kv[max(0, t - WINDOW + 1):t + 1]
        picked = blocks[chosen[t][chosen[t] >= 0]]
        own = torch.cat([window, picked])
        entries[t, :own.shape[0]], valid[t, :own.shape[0]] = own, True
    return q, entries, valid, torch.randn(HEADS, generator=gen)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float32))
def test_a_query_is_the_same_bits_in_the_prompt_and_alone(dtype):
    seed = fresh_seed()
    q, entries, valid, sinks = _laid_out(seed, dtype)
    scale = DIM ** -0.5
    with intra_op_threads(2):
        whole = consistent(q, entries, valid, sinks, scale=scale)
    with intra_op_threads(1):
        for t in (0, 1, WINDOW - 1, WINDOW, RATE * TOP_K, TOKENS // 2, TOKENS - 1):
            alone = consistent(q[t:t + 1], entries[t:t + 1], valid[t:t + 1], sinks, scale=scale)
            assert first_bit_difference(alone[0], whole[t]) is None, (seed, t)
        tail = consistent(q[-5:], entries[-5:], valid[-5:], sinks, scale=scale)  # a decode step of five
        assert first_bit_difference(tail, whole[-5:]) is None, seed
    expected = attend(q, entries, valid, sinks, scale=scale)
    error = float((whole.double() - expected).abs().max() / expected.abs().max())
    print(f"seed {seed}: consistent {dtype} vs float64 {error:.2e} (tolerance {TOLERANCE[dtype]:g})")
    assert error <= TOLERANCE[dtype]


def test_fast_decode_is_not_the_fast_prefill():
    seed = fresh_seed()
    q, entries, valid, sinks = _laid_out(seed, torch.float32)
    scale = DIM ** -0.5
    prefill = fast(q, entries, valid, sinks, scale=scale)
    expected = attend(q, entries, valid, sinks, scale=scale)
    differing = 0
    for t in range(TOKENS):
        step = fast_split_kv(q[t:t + 1], entries[t:t + 1], valid[t:t + 1], sinks, scale=scale)
        error = float((step[0].double() - expected[t]).abs().max() / expected[t].abs().max())
        assert error <= TOLERANCE[torch.float32], (seed, t, error)
        differing += first_bit_difference(step[0], prefill[t]) is not None
    print(f"seed {seed}: fast decode (split-KV) differs from fast prefill on {differing} of {TOKENS} queries")
    assert differing > 0
