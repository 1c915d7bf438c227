"""Phase consistency of attention: a token's output row is the same bits whether its sequence
was prefilled whole, prefilled in chunks, decoded token by token, or prefilled then decoded.

Every run uses a fresh ContiguousKV and the same random q, k, v for one sequence (GQA 4 query
heads over 2 KV heads, head dim 64); block_kv=32, so decode steps at positions 31, 32, 33,
63 and 64 sit on and around block boundaries. Negative control: flash-decoding (split-KV)
decode rows differ from SDPA prefill rows. `-s` prints the control's count.
"""
import pytest
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from kernels.models.batch import Segment
from kernels.models.state import ContiguousKV
from kernels.ops.attention.consistent import consistent as attention_consistent
from kernels.ops.attention.fast import fast_sdpa, fast_split_kv

SEQ_LEN, NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM = 70, 4, 2, 64
SCALE = HEAD_DIM ** -0.5
BOUNDARY_POSITIONS = (31, 32, 33, 63, 64)
CHUNK_SIZES = (1, 5, 16, 33)
DTYPES = (torch.float32, torch.bfloat16)


def _sequence(fresh_seed, dtype):
    generator = torch.Generator().manual_seed(fresh_seed)
    q = torch.randn(SEQ_LEN, NUM_Q_HEADS, HEAD_DIM, generator=generator).to(dtype)
    k = torch.randn(SEQ_LEN, NUM_KV_HEADS, HEAD_DIM, generator=generator).to(dtype)
    v = torch.randn(SEQ_LEN, NUM_KV_HEADS, HEAD_DIM, generator=generator).to(dtype)
    return q, k, v


def _run(op, q, k, v, pieces):
    """Output rows [SEQ_LEN, Hq, D] of one sequence fed as (start, length, case) pieces in
    order, through a fresh KV store, each piece a segment of its own step."""
    kv, outputs = ContiguousKV(), []
    for start, length, case in pieces:
        segment = Segment(seq_id=0, start=start, length=length, row=0, case=case)
        rows = slice(start, start + length)
        outputs.append(op(q[rows], k[rows], v[rows], (segment,), kv))
    return torch.cat(outputs)


def _chunks(chunk_size, case="engine_prefill", start=0, stop=SEQ_LEN):
    return [(lo, min(chunk_size, stop - lo), case) for lo in range(start, stop, chunk_size)]


def _consistent(q, k, v, segments, kv):
    return attention_consistent(q, k, v, segments, kv, scale=SCALE, block_kv=32, row_multiple=8)


@pytest.mark.parametrize("dtype", DTYPES)
def test_consistent_attention_is_phase_consistent(dtype, fresh_seed):
    q, k, v = _sequence(fresh_seed, dtype)
    full = _run(_consistent, q, k, v, [(0, SEQ_LEN, "engine_prefill")])
    schedules = {"trainer full sequence": [(0, SEQ_LEN, "trainer_fwd")],
                 "decode token by token": _chunks(1, "engine_decode")}
    schedules.update({f"chunked prefill by {size}": _chunks(size) for size in CHUNK_SIZES})
    schedules.update({f"prefill {n} then decode": [(0, n, "engine_prefill")] + _chunks(1, "engine_decode", n)
                      for n in BOUNDARY_POSITIONS})
    for name, pieces in schedules.items():
        got = _run(_consistent, q, k, v, pieces)
        for position in BOUNDARY_POSITIONS:
            assert_bitwise_equal(got[position], full[position],
                                 f"attention.consistent {dtype}, {name}, position {position}, seed {fresh_seed}")
        assert_bitwise_equal(got, full, f"attention.consistent {dtype}, {name} vs full prefill, seed {fresh_seed}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_fast_split_kv_decode_differs_from_sdpa_prefill(dtype, fresh_seed):
    """Negative control: the number of KV splits grows with the context and each split's
    softmax is merged by log-sum-exp, so decode rows round differently from prefill."""
    num_sequences, differing_rows = 4, 0  # bf16 rounding hides most splits: several sequences
    for index in range(num_sequences):
        q, k, v = _sequence(fresh_seed + index, dtype)
        prefill = _run(lambda *args: fast_sdpa(*args, scale=SCALE),
                       q, k, v, [(0, SEQ_LEN, "engine_prefill")])
        decode = _run(lambda *args: fast_split_kv(*args, scale=SCALE, tokens_per_split=32, max_splits=8),
                      q, k, v, _chunks(1, "engine_decode"))
        differing_rows += sum(first_bit_difference(decode[t], prefill[t]) is not None for t in range(SEQ_LEN))
    print(f"\nattention fast_split_kv decode vs fast_sdpa prefill, {dtype}: "
          f"{differing_rows}/{num_sequences * SEQ_LEN} token rows differ")
    assert differing_rows, (f"negative control: split-KV decode equals SDPA prefill on every row of "
                            f"{num_sequences} sequences, {dtype}, seeds {fresh_seed}..{fresh_seed + num_sequences - 1}")
