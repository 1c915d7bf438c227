"""Mamba-2 conv + scan + gated norm: prefill == chunked prefill (splits before, at and after
chunk boundaries) == token-by-token decode == trainer, per position, bit for bit, under the
consistent variants; the fast recurrent decode differs (negative control); the consistent
chunked form agrees with the float64 recurrence within a stated tolerance."""
import pytest
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from gates.reference import ssm as reference
from kernels.models.batch import Segment
from kernels.models.mamba_pool import PooledMambaStore
from kernels.models.mamba_state import MambaStateStore
from kernels.ops import ssm_scan
from kernels.ops.gated_norm.consistent import consistent as gated_norm_consistent
from kernels.ops.ssm_conv.consistent import consistent as ssm_conv_consistent
from kernels.ops.ssm_conv.fast import fast_conv1d, fast_window_sum
from kernels.ops.ssm_scan.consistent import consistent as ssm_scan_consistent
from kernels.ops.ssm_scan.fast import fast_chunked, fast_recurrent

HEADS, HEAD_DIM, GROUPS, STATE, KERNEL, CHUNK = 4, 8, 2, 16, 4, 16
CONV_DIM = HEADS * HEAD_DIM + 2 * GROUPS * STATE
LENGTH = 70  # crosses four chunk boundaries and ends mid-chunk
REFERENCE_TOLERANCE = 1e-4  # relative to max |y|, fp32 chunked vs float64 recurrence


def _inputs(seed, dtype):
    g = torch.Generator().manual_seed(seed)
    return {
        "xbc": torch.randn(LENGTH, CONV_DIM, generator=g).to(dtype),
        "dt_raw": torch.randn(LENGTH, HEADS, generator=g).to(dtype),
        "z": torch.randn(LENGTH, HEADS * HEAD_DIM, generator=g).to(dtype),
        "conv_w": (torch.randn(CONV_DIM, KERNEL, generator=g) * 0.5).to(dtype),
        "conv_b": (torch.randn(CONV_DIM, generator=g) * 0.1).to(dtype),
        "dt_bias": (torch.randn(HEADS, generator=g) * 0.5 - 1.0).to(dtype),
        "A_log": torch.rand(HEADS, generator=g).log1p().to(torch.float32),
        "D": torch.randn(HEADS, generator=g).to(dtype),
        "norm_w": (1.0 + 0.1 * torch.randn(HEADS * HEAD_DIM, generator=g)).to(dtype),
    }


def _store(dtype, store_type=MambaStateStore):
    return store_type(conv_rows=KERNEL - 1, conv_dim=CONV_DIM, num_heads=HEADS, head_dim=HEAD_DIM,
                      state_size=STATE, num_groups=GROUPS, chunk_size=CHUNK, dtype=dtype)


def settle(scan, segments, store):
    """What the model does after a scan door: the sequences moved to their segments' ends."""
    variant = next(name for name, form in ssm_scan.VARIANTS.items() if form is scan)
    store.settle(segments, keeps_unfinished_chunk=variant in ssm_scan.KEEPS_UNFINISHED_CHUNK)


def _door_calls(inputs, segments, rows, store, conv, scan):
    """The conv and scan doors over `segments` (rows numbered from 0), on `rows` of the inputs;
    the gated-norm outputs."""
    num_rows = sum(s.length for s in segments)
    xbc = conv(inputs["xbc"][rows], segments, store, inputs["conv_w"], inputs["conv_b"])
    x, B, C = xbc.split([HEADS * HEAD_DIM, GROUPS * STATE, GROUPS * STATE], dim=-1)
    y = scan(x.reshape(num_rows, HEADS, HEAD_DIM), B.reshape(num_rows, GROUPS, STATE),
             C.reshape(num_rows, GROUPS, STATE), inputs["dt_raw"][rows], segments, store,
             inputs["dt_bias"], inputs["A_log"], inputs["D"], chunk_size=CHUNK)
    settle(scan, segments, store)
    return gated_norm_consistent(y.reshape(num_rows, -1), inputs["z"][rows], inputs["norm_w"], eps=1e-5,
                                 group_size=HEADS * HEAD_DIM // GROUPS)


def _mixer(inputs, splits, conv, scan, store_type=MambaStateStore):
    """Run the sequence in segments of the given lengths; per-position gated-norm outputs."""
    store, outputs, start = _store(inputs["xbc"].dtype, store_type), [], 0
    for length in splits:
        segment = Segment(0, start, length, 0, "engine_prefill")
        outputs.append(_door_calls(inputs, (segment,), slice(start, start + length), store, conv, scan))
        start += length
    return torch.cat(outputs)


def _splits(pieces):
    """Segment lengths: the given pieces, then one-token decodes to LENGTH."""
    return list(pieces) + [1] * (LENGTH - sum(pieces))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_consistent_mixer_is_phase_consistent(dtype, fresh_seed):
    inputs = _inputs(fresh_seed, dtype)
    prefill = _mixer(inputs, [LENGTH], ssm_conv_consistent, ssm_scan_consistent)
    schedules = {
        "decode from 1": _splits([1]), "prefill 15 then decode": _splits([15]),
        "prefill 16 then decode": _splits([16]), "prefill 17 then decode": _splits([17]),
        "chunks 5,11,16,17,21": [5, 11, 16, 17, 21], "chunks 31,1,1,37": [31, 1, 1, 37],
        "chunks 32,33,5": [32, 33, 5], "chunks of 7": [7] * 10,
    }
    for name, splits in schedules.items():
        assert sum(splits) == LENGTH
        assert_bitwise_equal(_mixer(inputs, splits, ssm_conv_consistent, ssm_scan_consistent), prefill,
                             f"{dtype} {name} vs one prefill, seed {fresh_seed}")


def test_fast_recurrent_decode_differs_from_chunked_prefill(fresh_seed):
    inputs = _inputs(fresh_seed, torch.float32)
    prefill = _mixer(inputs, [LENGTH], fast_conv1d, fast_chunked)
    decode = _mixer(inputs, _splits([1]), fast_window_sum, fast_recurrent)
    difference = first_bit_difference(decode, prefill)
    print("fast decode vs fast prefill:", difference)
    assert difference is not None, f"negative control: fast decode equalled prefill, seed {fresh_seed}"
    chunked = _mixer(inputs, [5, 11, 16, 17, 21], fast_conv1d, fast_chunked)
    assert first_bit_difference(chunked, prefill) is not None, "fast chunked prefill at other splits should differ"


def test_consistent_scan_agrees_with_the_float64_recurrence(fresh_seed):
    inputs = _inputs(fresh_seed, torch.float32)
    store, segments = _store(torch.float32), (Segment(0, 0, LENGTH, 0, "trainer_fwd"),)
    xbc = ssm_conv_consistent(inputs["xbc"], segments, store, inputs["conv_w"], inputs["conv_b"])
    expected_xbc = reference.conv_silu(inputs["xbc"], inputs["conv_w"], inputs["conv_b"])
    conv_error = float((xbc.double() - expected_xbc).abs().max() / expected_xbc.abs().max())
    x, B, C = xbc.split([HEADS * HEAD_DIM, GROUPS * STATE, GROUPS * STATE], dim=-1)
    args = (x.reshape(LENGTH, HEADS, HEAD_DIM), B.reshape(LENGTH, GROUPS, STATE), C.reshape(LENGTH, GROUPS, STATE))
    y = ssm_scan_consistent(*args, inputs["dt_raw"], segments, store, inputs["dt_bias"], inputs["A_log"],
                            inputs["D"], chunk_size=CHUNK)
    settle(ssm_scan_consistent, segments, store)
    expected = reference.scan(*args, inputs["dt_raw"], inputs["dt_bias"], inputs["A_log"], inputs["D"])
    error = float((y.double() - expected).abs().max() / expected.abs().max())
    print(f"conv rel error {conv_error:.2e}, scan rel error {error:.2e} (tolerance {REFERENCE_TOLERANCE})")
    assert conv_error < REFERENCE_TOLERANCE and error < REFERENCE_TOLERANCE, (conv_error, error, fresh_seed)
    state = store.held(0)
    assert state.folded == 64 and state.pending[0].shape[0] == LENGTH - 64


@pytest.mark.parametrize("store_type", [MambaStateStore, PooledMambaStore])
def test_state_store_refuses_a_segment_at_the_wrong_position(store_type):
    store = _store(torch.float32, store_type)
    store.open(Segment(0, 0, 4, 0, "engine_prefill"))
    with pytest.raises(ValueError, match="state is at 0, segment starts at 4"):
        store.open(Segment(0, 4, 1, 0, "engine_decode"))


def _group_run(inputs_by_seq, prompt_lengths, conv, scan, store):
    """Sequences prefilled together (one group of segments), then decoded together a token a
    step (one group of one-row segments, the batched forms on a pooled store): each
    sequence's gated-norm outputs, in position order."""
    length = inputs_by_seq[0]["xbc"].shape[0]
    outputs = {seq: [] for seq in range(len(inputs_by_seq))}
    plan = [[(seq, 0, n) for seq, n in enumerate(prompt_lengths)]]
    plan += [[(seq, t, 1) for seq, n in enumerate(prompt_lengths) if t >= n]
             for t in range(min(prompt_lengths), length)]
    for pieces in plan:
        segments, rows, row = [], [], 0
        for seq, start, n in pieces:
            segments.append(Segment(seq, start, n, row, "engine_decode"))
            rows.append((seq, slice(start, start + n)))
            row += n
        stacked = {key: torch.cat([inputs_by_seq[seq][key][r] for seq, r in rows])
                   for key in ("xbc", "dt_raw", "z")}
        shared = {key: value for key, value in inputs_by_seq[0].items() if key not in stacked}
        out = _door_calls({**shared, **stacked}, tuple(segments), slice(None), store, conv, scan)
        for segment in segments:
            outputs[segment.seq_id].append(out[segment.rows])
    return [torch.cat(parts) for _, parts in sorted(outputs.items())]


def _sequences(seed, dtype, count):
    """`count` sequences' own rows over one set of weights."""
    weights = _inputs(seed, dtype)
    return [{**weights, **{key: _inputs(seed + 1 + i, dtype)[key] for key in ("xbc", "dt_raw", "z")}}
            for i in range(count)]


def test_pooled_store_gives_the_per_sequence_bits(fresh_seed):
    """The consistent doors on the engine's pooled store (one slot pool grown from 1, the
    sequences decoded as groups: on CPU one batched chunk re-play for all of them) give each
    sequence the bits of a run alone on its own per-sequence state; fresh slots after release
    hold no trace of the last sequence. A batched decode that does not fold the chunks that
    complete fails it."""
    sequences = _sequences(fresh_seed, torch.bfloat16, 5)
    prompts = [1, 15, 16, 17, 33]
    store = _store(torch.bfloat16, PooledMambaStore)
    together = _group_run(sequences, prompts, ssm_conv_consistent, ssm_scan_consistent, store)
    assert store.conv.shape[0] == 8, "5 sequences: the pool doubled from 1 slot to 8"
    for seq, (inputs, prompt) in enumerate(zip(sequences, prompts)):
        alone = _mixer(inputs, _splits([prompt]), ssm_conv_consistent, ssm_scan_consistent)
        assert_bitwise_equal(together[seq], alone, f"sequence {seq} (prompt {prompt}), seed {fresh_seed}")
    for seq in range(5):
        store.release(seq)
    again = _group_run(sequences[:2], prompts[:2], ssm_conv_consistent, ssm_scan_consistent, store)
    for seq in range(2):
        assert_bitwise_equal(again[seq], together[seq], f"sequence {seq} on a reused slot, seed {fresh_seed}")


FAST_BATCH_TOLERANCE = 1e-5  # relative to max |out|: the batched recurrence vs one sequence at a time


def test_fast_batched_decode_computes_the_recurrence(fresh_seed):
    """The fast forms' batched decode (every sequence's state gathered by slot, put back)
    computes what their one-sequence decode does, to within fp32 reordering; no bits are
    claimed for the fast contract."""
    sequences = _sequences(fresh_seed, torch.float32, 4)
    prompts = [3, 9, 16, 20]
    store = _store(torch.float32, PooledMambaStore)
    batched = _group_run(sequences, prompts, fast_window_sum, fast_recurrent, store)
    assert store.rows is None, "the fast recurrence buffers no rows"
    for seq, (inputs, prompt) in enumerate(zip(sequences, prompts)):
        alone = _mixer(inputs, _splits([prompt]), fast_window_sum, fast_recurrent)
        error = float((batched[seq] - alone).abs().max() / alone.abs().max())
        print(f"sequence {seq}: batched vs alone rel error {error:.2e} (tolerance {FAST_BATCH_TOLERANCE})")
        assert error < FAST_BATCH_TOLERANCE, (seq, error, fresh_seed)


def test_decode_graph_tables_serve_the_pools_and_settle_after_the_replay(fresh_seed):
    """What a decode graph does with a Mamba layer's pooled store (kernels/engine/mamba_tables.py):
    capture serves static tables to dummy rows (the store's scratch slot, positions untouched,
    the model's settle only recorded); a replay's fill copies the real rows' slots and buffered
    counts in, padding on the scratch slot, and the recorded settle moves the real sequences
    on (a completed chunk folded); a captured recurrence cannot take buffered rows (eager);
    a fourth sequence past the reserved three moves the pools (capture again)."""
    from contextlib import ExitStack

    from kernels.engine.mamba_tables import MambaTables
    store = _store(torch.float32, PooledMambaStore)
    tables = MambaTables(lambda: [store], max_batch=3, device="cpu")
    g = torch.Generator().manual_seed(fresh_seed)
    lengths = (CHUNK - 1, 5, CHUNK)  # buffered after prefill: CHUNK - 1, 5, 0
    for seq, length in enumerate(lengths):
        x, dt_raw = torch.randn(length, HEADS, HEAD_DIM, generator=g), torch.randn(length, HEADS, generator=g)
        B, C = (torch.randn(length, GROUPS, STATE, generator=g) for _ in range(2))
        prefill = (Segment(seq, 0, length, 0, "engine_prefill"),)
        ssm_scan_consistent(x, B, C, dt_raw, prefill, store, torch.zeros(HEADS), torch.zeros(HEADS),
                            torch.ones(HEADS), chunk_size=CHUNK)
        settle(ssm_scan_consistent, prefill, store)
    slots = [store.held(seq).slot for seq in range(3)]
    dummy = tuple(Segment(-1 - row, 0, 1, row, "engine_graph") for row in range(3))
    with ExitStack() as serving:
        tables.serve(dummy, 3, serving)
        served_slots, served_buffered = store.decode_tables(dummy)
        assert served_slots.tolist() == [store.scratch_slot] * 3 and served_buffered.tolist() == [0] * 3
        assert not store.holds_buffered_rows(dummy)
        store.settle(dummy, keeps_unfinished_chunk=True)  # what the model does after the consistent scan
    assert tables.recorded_settles() == [True] and store.scratch_slot not in slots
    assert [store.held(seq).position for seq in range(3)] == list(lengths), "capture moved no sequence"
    real = tuple(Segment(seq, length, 1, seq, "engine_graph") for seq, length in enumerate(lengths))
    assert tables.fill(real[:2], 3, [True])
    assert tables.tables[:, 0, :3].tolist() == [slots[:2] + [store.scratch_slot], [CHUNK - 1, 5, 0]]
    tables.settle(real[:2], [True])
    assert [(store.held(seq).folded, store.held(seq).buffered) for seq in range(3)] == [(CHUNK, 0), (0, 6), (CHUNK, 0)]
    assert (tables.buffered_in_graph, tables.folded_in_graph) == (2, 1)
    moved_on = tuple(Segment(seq, store.held(seq).position, 1, seq, "engine_graph") for seq in range(3))
    assert not tables.fill(moved_on, 3, [False]), "a captured recurrence cannot fold sequence 1's buffered rows"
    assert not tables.moved()
    store.open(Segment(3, 0, 1, 0, "engine_prefill"))
    assert tables.moved()
