"""Logic tests of the consistent Gated DeltaNet row kernel (kernels/ops/gated_delta/triton.py) on
CPU through the Triton interpreter: one sequence scanned whole, in prefills split before, at and
after chunk boundaries and row by row gives the same outputs, state and kept rows bit for bit; the
engine's batched decode on the pools is each sequence's own bits; the backward is the torch chunk
form's, bit for bit; the float64 recurrence within a stated tolerance. They prove logic, not GPU
bits (the gates do that on the device). Negative controls: the torch chunk form of the same rule
(another arithmetic) differs from the kernel's bits; a doubled state slot moves its sequence only.
"""
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from tests.ops.test_gated_delta import CHUNK, HEADS, KEY_DIM, LENGTH, REFERENCE_TOLERANCE, VALUE_DIM
from tests.ops.test_gated_delta import delta_inputs as _raw
from tests.ops.triton.interpreter import import_kernel, run_checks


def test_gated_delta_kernel_under_the_triton_interpreter(fresh_seed):
    """Runs this module's check_* functions in a child pytest with TRITON_INTERPRET=1."""
    run_checks(__file__, fresh_seed)


def _in_calls(rows, cuts):
    """The prepared rows cut at `cuts`, one kernel call each (benchmarks/gpu_delta_check.py's walk,
    imported in the interpreter's child)."""
    import_kernel("gated_delta.triton")  # refuses to run outside the interpreter
    from benchmarks.gpu_delta_check import in_calls
    return in_calls(rows, cuts, CHUNK)


def _empty_state():
    from kernels.ops.gated_delta.forms import DeltaState
    return DeltaState.empty(HEADS, KEY_DIM, VALUE_DIM)


def check_gated_delta_phases_agree_bitwise(fresh_seed):
    """Whole == split before / at / after a boundary == prefill then one row at a time: y, S, the
    folded count and the kept rows, bit for bit; the float64 recurrence within 1e-4 of max |y|."""
    from gates.reference.gated_delta import delta_rule
    from kernels.ops.gated_delta.forms import prepared
    raw = _raw(fresh_seed)
    rows = prepared(*raw)
    whole, whole_state = _in_calls(rows, [])
    for cuts in ([CHUNK - 1, 40], [CHUNK, 2 * CHUNK], [CHUNK + 1, 3 * CHUNK + 5], list(range(40, LENGTH))):
        y, state = _in_calls(rows, cuts)
        assert_bitwise_equal(y, whole, f"cuts {cuts[:3]}, seed={fresh_seed}")
        assert_bitwise_equal(state.ssm, whole_state.ssm, f"S, cuts {cuts[:3]}")
        assert state.folded == whole_state.folded == LENGTH // CHUNK * CHUNK
        for mine, theirs in zip(state.pending, whole_state.pending):
            assert_bitwise_equal(mine, theirs, f"kept rows, cuts {cuts[:3]}")
    expected = delta_rule(*raw)
    error = float((whole.double() - expected).abs().max() / expected.abs().max())
    print(f"gated_delta rows (Triton) vs float64 recurrence: {error:.2e} of max |y| (tolerance {REFERENCE_TOLERANCE})")
    assert error <= REFERENCE_TOLERANCE, (error, fresh_seed)
    from kernels.ops.gated_delta.fast import fast_chunked  # negative control: the chunk form, same chunks
    chunked, _ = fast_chunked(*raw, _empty_state(), chunk_size=CHUNK)
    assert first_bit_difference(chunked, whole) is not None, "the chunk form gave the row kernel's bits"


def check_gated_delta_backward_is_the_torch_forms(fresh_seed):
    """The trainer's gradients through the kernel are the torch chunk form's, bit for bit (the
    backward recomputes that form); the forward keeps the kernel's bits; a call that does not start
    at the sequence's first row refuses to record a backward."""
    import pytest
    rows_kernel = import_kernel("gated_delta.triton")
    from kernels.ops.chunk_scan import run_chunks
    from kernels.ops.gated_delta.forms import chunk, prepared
    raw = [t.clone().requires_grad_(True) for t in _raw(fresh_seed)]
    weight = torch.randn(LENGTH, HEADS, VALUE_DIM, generator=torch.Generator().manual_seed(fresh_seed))
    y, _ = rows_kernel.consistent(*prepared(*raw), _empty_state(), chunk_size=CHUNK)
    ours = torch.autograd.grad((y * weight).sum(), raw)
    reference = run_chunks(chunk, prepared(*raw), _empty_state().ssm, CHUNK)[0]
    theirs = torch.autograd.grad((reference * weight).sum(), raw)
    for name, mine, want in zip("qkvgb", ours, theirs):
        assert_bitwise_equal(mine, want, f"d/d{name} seed={fresh_seed}")
    detached = prepared(*(t.detach() for t in raw))
    assert_bitwise_equal(y.detach(), _in_calls(detached, [])[0], "forward bits")
    _, after = rows_kernel.consistent(*(t[:CHUNK + 3] for t in detached), _empty_state(), chunk_size=CHUNK)
    with pytest.raises(ValueError, match="starts at row 19"):
        rows_kernel.consistent(*(t[CHUNK + 3:] for t in prepared(*raw)), after, chunk_size=CHUNK)


def check_gated_delta_pooled_decode_is_each_sequence_s_bits(fresh_seed):
    """The engine's batched decode (decode_pooled: one launch, every sequence's row at its place in
    its chunk, on the pools) == each sequence's own calls, bit for bit, with histories that leave
    0, 1, Q-1 and Q-2 rows kept (a decode completes a chunk and folds it); S and the kept rows
    equal too. Negative control: a sequence's slot of the state pool doubled moves its rows only."""
    rows_kernel = import_kernel("gated_delta.triton")
    from kernels.ops.gated_delta.forms import kept_row_shapes, prepared
    histories, decodes = [CHUNK, 17, 2 * CHUNK - 2, CHUNK - 1, 5], 8  # the ones complete
    sequences = [prepared(*_raw(fresh_seed + i, max(histories) + decodes)) for i in range(len(histories))]
    alone = [_in_calls([t[:h + decodes] for t in rows], [h, *range(h + 1, h + decodes)])
             for rows, h in zip(sequences, histories)]

    def batched(disturb=None):
        slots = len(histories) + 1
        pools = [torch.zeros(slots, CHUNK, *shape) for shape in kept_row_shapes(HEADS, KEY_DIM, VALUE_DIM)]
        ssm = torch.zeros(slots, HEADS, KEY_DIM, VALUE_DIM)
        order = torch.tensor([3, 0, 4, 1, 2])  # slot of each sequence, not its index
        for seq, (rows, h) in enumerate(zip(sequences, histories)):
            _, state = rows_kernel.consistent(*(t[:h] for t in rows), _empty_state(), chunk_size=CHUNK)
            ssm[order[seq]] = state.ssm
            for pool, kept in zip(pools, state.pending or ()):
                pool[order[seq], :kept.shape[0]] = kept
        if disturb is not None:
            ssm[order[disturb]] *= 2
        outputs = []
        for step in range(decodes):
            new = [torch.stack([rows[h + step] for rows, h in zip(seq_rows, histories)]) for seq_rows in
                   zip(*sequences)]
            held = torch.tensor([(h + step) % CHUNK for h in histories])
            outputs.append(rows_kernel.decode_pooled(*new, order, held, pools, ssm, chunk_size=CHUNK))
        return torch.stack(outputs, dim=1), ssm[order], pools

    y, ssm, pools = batched()
    for seq, ((y_alone, state), h) in enumerate(zip(alone, histories)):
        assert_bitwise_equal(y[seq], y_alone[h:], f"sequence {seq} (history {h}), seed={fresh_seed}")
        assert_bitwise_equal(ssm[seq], state.ssm, f"S of sequence {seq}")
        kept = (h + decodes) % CHUNK
        slot = [3, 0, 4, 1, 2][seq]
        assert (state.pending is None) == (kept == 0), (seq, kept)
        for pool, mine in zip(pools, state.pending or ()):
            assert_bitwise_equal(pool[slot, :kept], mine, f"kept rows of sequence {seq}")
    disturbed, _, _ = batched(disturb=2)
    moved = [first_bit_difference(disturbed[seq], y[seq]) is not None for seq in range(len(histories))]
    assert moved == [seq == 2 for seq in range(len(histories))], moved


def check_gated_delta_sequences_in_one_call_are_each_alone(fresh_seed):
    """Sequences in one call (consistent_many: three launches for all, the engine's prefill and the
    trainer) == each sequence's own call, bit for bit: y, S and the kept rows, with sequences that
    start from a fresh state, mid-chunk (kept rows) and on a boundary, of lengths inside one chunk
    and across several; a recorded call's gradients == each sequence's torch form. Negative
    control: one sequence's S0 doubled moves its rows only."""
    rows_kernel = import_kernel("gated_delta.triton")
    from kernels.ops.chunk_scan import run_chunks
    from kernels.ops.gated_delta.forms import DeltaState, chunk, prepared
    histories, lengths = [0, 5, CHUNK, CHUNK + 3], [2 * CHUNK + 5, CHUNK - 5, 1, CHUNK]
    sequences = [prepared(*_raw(fresh_seed + i, h + n)) for i, (h, n) in enumerate(zip(histories, lengths))]
    starts = [rows_kernel.consistent(*(t[:h] for t in rows), _empty_state(), chunk_size=CHUNK)[1] if h else
              _empty_state() for rows, h in zip(sequences, histories)]
    alone = [rows_kernel.consistent(*(t[h:] for t in rows), state, chunk_size=CHUNK)
             for rows, h, state in zip(sequences, histories, starts)]

    def together(states):
        new = [torch.cat(parts) for parts in zip(*[[t[h:] for t in rows] for rows, h in zip(sequences, histories)])]
        return rows_kernel.consistent_many(*new, lengths, states, chunk_size=CHUNK)

    y, after = together(starts)
    cuts = [0, *torch.tensor(lengths).cumsum(0).tolist()]
    for seq, ((y_alone, state), lo, hi) in enumerate(zip(alone, cuts, cuts[1:])):
        assert_bitwise_equal(y[lo:hi], y_alone, f"sequence {seq}, seed={fresh_seed}")
        assert_bitwise_equal(after[seq].ssm, state.ssm, f"S of sequence {seq}")
        assert after[seq].folded == state.folded, (seq, after[seq].folded, state.folded)
        assert (after[seq].pending is None) == (state.pending is None), seq
        for mine, theirs in zip(after[seq].pending or (), state.pending or ()):
            assert_bitwise_equal(mine, theirs, f"kept rows of sequence {seq}")
    doubled = [DeltaState(s.ssm * 2, s.folded, s.pending) if i == 3 else s for i, s in enumerate(starts)]
    disturbed, _ = together(doubled)
    moved = [first_bit_difference(disturbed[lo:hi], y[lo:hi]) is not None for lo, hi in zip(cuts, cuts[1:])]
    assert moved == [seq == 3 for seq in range(len(lengths))], moved

    lengths = [CHUNK + 3, 5]
    raw = [[t.clone().requires_grad_(True) for t in _raw(fresh_seed + 7 + i, n)] for i, n in enumerate(lengths)]
    fresh = [_empty_state() for _ in lengths]
    y, _ = rows_kernel.consistent_many(*(torch.cat(p) for p in zip(*[prepared(*r) for r in raw])), lengths, fresh,
                                       chunk_size=CHUNK)
    weight = torch.randn(y.shape, generator=torch.Generator().manual_seed(fresh_seed))
    leaves = [t for r in raw for t in r]
    ours = torch.autograd.grad((y * weight).sum(), leaves)
    reference = torch.cat([run_chunks(chunk, prepared(*r), s.ssm, CHUNK)[0] for r, s in zip(raw, fresh)])
    theirs = torch.autograd.grad((reference * weight).sum(), leaves)
    for index, (mine, want) in enumerate(zip(ours, theirs)):
        assert_bitwise_equal(mine, want, f"gradient {index} (sequence {index // 5}), seed={fresh_seed}")
