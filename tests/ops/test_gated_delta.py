"""Gated DeltaNet's delta rule (kernels/ops/gated_delta/): under the consistent variant one
sequence's outputs and state are the same bits scanned whole (the trainer, two threads), in a
prefill split before, at and after chunk boundaries, and a prefill then one row at a time (the
engine, one thread); the fast variants differ there (negative control, with its size); both
agree with the float64 recurrence within a stated tolerance."""
import pytest
import torch

from gates.case_calls import intra_op_threads
from gates.compare import first_bit_difference
from gates.inputs import fresh_seed
from gates.reference.gated_delta import delta_rule
from kernels.ops.gated_delta.consistent import consistent
from kernels.ops.gated_delta.fast import fast_chunked, fast_recurrent
from kernels.ops.gated_delta.forms import DeltaState

KEY_HEADS, HEADS, KEY_DIM, VALUE_DIM, CHUNK = 2, 4, 16, 8, 16
LENGTH = 70  # four chunk boundaries crossed, ends mid-chunk
REFERENCE_TOLERANCE = 1e-4  # relative to max |y|: fp32 chunked and recurrent vs the float64 recurrence


def delta_inputs(seed, length=LENGTH):
    """Raw q, k, v, g, beta of `length` rows (the Triton kernel's checks take them too)."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(length, KEY_HEADS, KEY_DIM, generator=gen),
            torch.randn(length, KEY_HEADS, KEY_DIM, generator=gen),
            torch.randn(length, HEADS, VALUE_DIM, generator=gen),
            -torch.rand(length, HEADS, generator=gen) * 0.5,  # log decay <= 0
            torch.rand(length, HEADS, generator=gen))


def _in_calls(variant, rows, cuts, threads):
    """variant over `rows` cut at `cuts`, each piece one call after the state the last left."""
    with intra_op_threads(threads):
        state, outputs = DeltaState.empty(HEADS, KEY_DIM, VALUE_DIM), []
        for lo, hi in zip([0, *cuts], [*cuts, LENGTH]):
            y, state = variant(*(t[lo:hi] for t in rows), state, chunk_size=CHUNK)
            outputs.append(y)
        return torch.cat(outputs), state


def _splits():
    """Prefills cut before, at and after a chunk boundary, and prefill then one row at a time."""
    return {"split before a boundary": [CHUNK - 1, 40], "split at boundaries": [CHUNK, 2 * CHUNK],
            "split after a boundary": [CHUNK + 1, 3 * CHUNK + 5], "decode row by row": list(range(20, LENGTH))}


def test_consistent_whole_equals_every_split_and_decode():
    seed = fresh_seed()
    rows = delta_inputs(seed)
    whole, whole_state = _in_calls(consistent, rows, [], threads=2)
    for name, cuts in _splits().items():
        y, state = _in_calls(consistent, rows, cuts, threads=1)
        assert first_bit_difference(y, whole) is None, (name, seed, first_bit_difference(y, whole))
        assert first_bit_difference(state.ssm, whole_state.ssm) is None, (name, seed)
        assert state.folded == whole_state.folded == LENGTH // CHUNK * CHUNK
        assert all(first_bit_difference(a, b) is None for a, b in zip(state.pending, whole_state.pending)), name


def test_fast_variants_differ_between_prefill_and_decode():
    seed = fresh_seed()
    rows = delta_inputs(seed)
    prefill, _ = _in_calls(fast_chunked, rows, [], threads=2)
    decode, _ = _in_calls(fast_recurrent, rows, [], threads=1)
    differing = (prefill.view(torch.int32) != decode.view(torch.int32)).any(-1).any(-1).sum().item()
    print(f"fast chunked prefill vs recurrent decode: {differing} of {LENGTH} rows differ (seed {seed})")
    assert differing > LENGTH // 2, (differing, seed)
    split, _ = _in_calls(fast_chunked, rows, [CHUNK + 1], threads=2)
    assert first_bit_difference(split, prefill) is not None, "chunks from each call's first row moved nothing"


@pytest.mark.parametrize("variant", [consistent, fast_chunked, fast_recurrent], ids=lambda f: f.__name__)
def test_agrees_with_the_float64_recurrence(variant):
    seed = fresh_seed()
    rows = delta_inputs(seed)
    y, _ = _in_calls(variant, rows, [], threads=2)
    expected = delta_rule(*rows)
    error = ((y.double() - expected).abs().max() / expected.abs().max()).item()
    print(f"{variant.__name__}: max |y - float64| / max |y| = {error:.2e} (tolerance {REFERENCE_TOLERANCE})")
    assert error <= REFERENCE_TOLERANCE, (error, seed)


def test_agrees_with_transformers_chunked_rule():
    """Qwen3-Next's torch form in transformers (the parity target), batch of one, our layout."""
    modeling = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    seed = fresh_seed()
    rows = delta_inputs(seed)
    ours, state = _in_calls(fast_chunked, rows, [], threads=2)
    q, k, v, g, beta = (t[None] for t in rows)
    theirs, end = modeling.torch_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=CHUNK, output_final_state=True,
                                                        use_qk_l2norm_in_kernel=True)
    error = ((ours - theirs[0]).abs().max() / theirs.abs().max()).item()
    state_error = ((state.ssm - end[0]).abs().max() / end.abs().max()).item()
    same = first_bit_difference(ours, theirs[0]) is None and first_bit_difference(state.ssm, end[0]) is None
    print(f"fast_chunked vs transformers: output {error:.2e}, state {state_error:.2e} "
          f"(tolerance {REFERENCE_TOLERANCE}); bit for bit: {same}")
    assert error <= REFERENCE_TOLERANCE and state_error <= REFERENCE_TOLERANCE, (error, state_error, seed)


def test_a_fast_variant_refuses_rows_a_consistent_call_kept():
    rows = delta_inputs(fresh_seed())
    _, kept = consistent(*(t[:CHUNK + 3] for t in rows), DeltaState.empty(HEADS, KEY_DIM, VALUE_DIM), chunk_size=CHUNK)
    with pytest.raises(ValueError, match="cannot fold 3 rows"):
        fast_recurrent(*(t[CHUNK + 3:CHUNK + 4] for t in rows), kept, chunk_size=CHUNK)


def test_region_form_keeps_the_sequence_s_bits_across_calls_and_makes_the_gates_alike(fresh_seed):
    """The variant a contract binds (region.py): the gates made from raw a, b, each segment on its
    sequence's state in a store; prefill then decode row by row equals the whole sequence, bit for
    bit, under the consistent variant, and the fast decode differs from its prefill."""
    from kernels.models.batch import Segment
    from kernels.models.mamba_pool import delta_store
    from kernels.ops.gated_delta import KEEPS_UNFINISHED_CHUNK, VARIANTS
    generator = torch.Generator().manual_seed(fresh_seed)
    q, k, v = delta_inputs(fresh_seed)[:3]
    a, b = torch.randn(LENGTH, HEADS, generator=generator), torch.randn(LENGTH, HEADS, generator=generator)
    A_log, dt_bias = torch.rand(HEADS, generator=generator) * 2, torch.rand(HEADS, generator=generator) - 3

    def run(variant, cuts):
        store = delta_store(conv_rows=3, conv_dim=8, num_heads=HEADS, key_dim=KEY_DIM, value_dim=VALUE_DIM,
                            dtype=torch.float32)
        out = []
        for lo, hi in zip([0, *cuts], [*cuts, LENGTH]):
            segment = Segment(seq_id=5, start=lo, length=hi - lo, row=0, case="engine_decode")
            out.append(VARIANTS[variant](*(t[lo:hi] for t in (q, k, v, a, b)), (segment,), store, A_log, dt_bias,
                                         chunk_size=CHUNK))
            store.settle((segment,), keeps_unfinished_chunk=variant in KEEPS_UNFINISHED_CHUNK)  # the model's step
        return torch.cat(out), store.held(5)

    whole, state = run("consistent", [])
    stepped, stepped_state = run("consistent", [CHUNK + 3, *range(40, LENGTH)])
    assert first_bit_difference(stepped, whole) is None, fresh_seed
    assert first_bit_difference(stepped_state.ssm, state.ssm) is None and stepped_state.position == LENGTH
    prefill, _ = run("fast_chunked", [])
    decode, _ = run("fast_recurrent", [])
    assert first_bit_difference(decode, prefill) is not None, "the fast recurrence matched the chunked prefill"


def test_a_decode_step_on_the_engine_s_pools_is_each_sequence_s_own_bits(fresh_seed):
    """The region's consistent form on the engine's pooled store (decode_pooled: one batched
    re-play read from and written to the slot pools) == the same step on per-sequence states ==
    each sequence stepped alone on the pools: outputs, S and the kept rows, with sequences at
    every place in their chunks (a fresh sequence's first row, first, middle, completing, the row
    after). Prefills go through the pools' per-segment views. Negative control: a step that
    re-plays each chunk without its kept rows (as a fold-everything decode would read them) differs."""
    from kernels.models.batch import Segment
    from kernels.models.mamba_pool import delta_store
    from kernels.ops.gated_delta.region import consistent as region
    generator = torch.Generator().manual_seed(fresh_seed)
    q, k, v = delta_inputs(fresh_seed)[:3]
    a, b = torch.randn(LENGTH, HEADS, generator=generator), torch.randn(LENGTH, HEADS, generator=generator)
    A_log, dt_bias = torch.rand(HEADS, generator=generator) * 2, torch.rand(HEADS, generator=generator) - 3
    before = [CHUNK - 1, 0, 3, CHUNK, 2 * CHUNK - 1, CHUNK + 7, 3 * CHUNK - 1, 40]

    def stepped(pooled, together, skip_kept=False):
        store = delta_store(conv_rows=3, conv_dim=8, num_heads=HEADS, key_dim=KEY_DIM, value_dim=VALUE_DIM,
                            dtype=torch.float32, chunk_size=CHUNK, pooled=pooled)
        for seq, n in enumerate(before):  # each sequence's prefill: row n of the inputs comes next
            if not n:
                continue
            segment = Segment(seq_id=seq, start=0, length=n, row=0, case="engine_prefill")
            region(*(t[:n] for t in (q, k, v, a, b)), (segment,), store, A_log, dt_bias, chunk_size=CHUNK)
            store.settle((segment,), keeps_unfinished_chunk=True)
        if skip_kept:
            for seq in (seq for seq, n in enumerate(before) if n):
                store.held(seq).buffered = 0  # the rows stay in the pools, unread
        segments = [Segment(seq_id=seq, start=n if not skip_kept else n - n % CHUNK, length=1, row=seq,
                            case="engine_decode") for seq, n in enumerate(before)]
        new = [torch.stack([t[n] for n in before]) for t in (q, k, v, a, b)]
        groups = [segments] if together else [[s] for s in segments]
        y = torch.cat([region(*(t[g[0].row:g[-1].row + 1] for t in new), g, store, A_log, dt_bias, chunk_size=CHUNK)
                       for g in groups])
        for group in groups:
            store.settle(group, keeps_unfinished_chunk=True)
        return y, [store.held(seq) for seq in range(len(before))]

    pooled, pooled_states = stepped(pooled=True, together=True)
    for label, (y, states) in {"per-sequence states": stepped(pooled=False, together=True),
                               "each alone": stepped(pooled=True, together=False)}.items():
        assert first_bit_difference(pooled, y) is None, (label, fresh_seed)
        for mine, theirs, n in zip(pooled_states, states, before):
            assert first_bit_difference(mine.ssm, theirs.ssm) is None, (label, n, fresh_seed)
            assert mine.position == theirs.position == n + 1
            assert mine.folded == theirs.folded == (n + 1) // CHUNK * CHUNK, (label, n)
            assert (mine.pending is None) == (theirs.pending is None) == ((n + 1) % CHUNK == 0), (label, n)
            if mine.pending is not None:
                assert all(first_bit_difference(x, y) is None for x, y in zip(mine.pending, theirs.pending)), n
    blind, _ = stepped(pooled=True, together=True, skip_kept=True)
    moved = sum(first_bit_difference(blind[i], pooled[i]) is not None for i in range(len(before)))
    assert moved >= len([n for n in before if n % CHUNK]) - 1, f"skipping the kept rows moved {moved} rows"


def test_the_fast_decode_on_the_engine_s_pools_steps_every_sequence_at_once(fresh_seed):
    """The fast contract's decode (region fast_recurrent) on the engine's pooled store takes one
    batched recurrence step by tensor ops (recurrent_pooled, what a decode graph captures): each
    sequence's output and S as its own step on per-sequence states, within the float64
    recurrence's tolerance; and it refuses rows a consistent prefill kept, as the per-sequence form."""
    from kernels.models.batch import Segment
    from kernels.models.mamba_pool import delta_store
    from kernels.ops.gated_delta.region import consistent as consistent_region
    from kernels.ops.gated_delta.region import fast_chunked as chunked_region
    from kernels.ops.gated_delta.region import fast_recurrent as recurrent_region
    generator = torch.Generator().manual_seed(fresh_seed)
    q, k, v = delta_inputs(fresh_seed)[:3]
    a, b = torch.randn(LENGTH, HEADS, generator=generator), torch.randn(LENGTH, HEADS, generator=generator)
    A_log, dt_bias = torch.rand(HEADS, generator=generator) * 2, torch.rand(HEADS, generator=generator) - 3
    before = [3, CHUNK, 2 * CHUNK + 5, 40]
    new = [torch.stack([t[n] for n in before]) for t in (q, k, v, a, b)]

    def stepped(pooled, prefill=chunked_region):
        store = delta_store(conv_rows=3, conv_dim=8, num_heads=HEADS, key_dim=KEY_DIM, value_dim=VALUE_DIM,
                            dtype=torch.float32, chunk_size=CHUNK, pooled=pooled)
        for seq, n in enumerate(before):
            segment = Segment(seq_id=seq, start=0, length=n, row=0, case="engine_prefill")
            prefill(*(t[:n] for t in (q, k, v, a, b)), (segment,), store, A_log, dt_bias, chunk_size=CHUNK)
            store.settle((segment,), keeps_unfinished_chunk=prefill is consistent_region)
        segments = [Segment(seq_id=s, start=n, length=1, row=s, case="engine_decode") for s, n in enumerate(before)]
        y = recurrent_region(*new, segments, store, A_log, dt_bias, chunk_size=CHUNK)
        return y, [store.held(seq).ssm.clone() for seq in range(len(before))]

    pooled, pooled_states = stepped(pooled=True)
    alone, alone_states = stepped(pooled=False)
    scale = float(alone.abs().max())
    assert float((pooled - alone).abs().max()) <= REFERENCE_TOLERANCE * scale, fresh_seed
    for mine, theirs in zip(pooled_states, alone_states):
        assert float((mine - theirs).abs().max()) <= REFERENCE_TOLERANCE * float(theirs.abs().max()), fresh_seed
    print(f"pooled fast decode vs per-sequence: {(pooled != alone).sum().item()} of {pooled.numel()} values differ")
    with pytest.raises(ValueError, match="cannot fold"):
        stepped(pooled=True, prefill=consistent_region)


def test_the_cpr_benchmarks_chunkwise_decode_is_the_recurrence(fresh_seed):
    """benchmarks/gpu_cpr_table.py's chunkwise_everywhere decode (each new row through the chunk
    form, zero-padded, every sequence in one call on the pools) gives the one-step recurrence's
    outputs and states within fp32 rounding (2e-5 of their largest, printed), after a prefill that
    folds every row: the table's column is the same function, not a cheaper one."""
    from benchmarks.gpu_cpr_table import chunkwise_decode
    from kernels.models.batch import Segment
    from kernels.models.mamba_pool import delta_store
    from kernels.ops.gated_delta.region import fast_chunked, fast_recurrent
    generator = torch.Generator().manual_seed(fresh_seed)
    q, k, v = delta_inputs(fresh_seed)[:3]
    a, b = torch.randn(LENGTH, HEADS, generator=generator), torch.randn(LENGTH, HEADS, generator=generator)
    A_log, dt_bias = torch.rand(HEADS, generator=generator) * 2, torch.rand(HEADS, generator=generator) - 3
    sequences, prompt = 4, 10

    def decoded(decode):
        store = delta_store(conv_rows=3, conv_dim=8, num_heads=HEADS, key_dim=KEY_DIM, value_dim=VALUE_DIM,
                            dtype=torch.float32, chunk_size=CHUNK, pooled=True)
        segments = tuple(Segment(seq_id=i, start=0, length=prompt, row=i * prompt, case="engine_prefill")
                         for i in range(sequences))
        fast_chunked(*(t[:sequences * prompt] for t in (q, k, v, a, b)), segments, store, A_log, dt_bias,
                     chunk_size=CHUNK)
        store.settle(segments, keeps_unfinished_chunk=False)
        outputs = []
        for step in range(3):
            rows = slice(sequences * prompt + step * sequences, sequences * prompt + (step + 1) * sequences)
            segments = tuple(Segment(seq_id=i, start=prompt + step, length=1, row=i, case="engine_decode")
                             for i in range(sequences))
            slots = store.decode_slots(segments)
            outputs.append(decode(*(t[rows] for t in (q, k, v, a, b)), segments, store, A_log, dt_bias,
                                  chunk_size=CHUNK))
            store.settle(segments, keeps_unfinished_chunk=False)
        return torch.stack(outputs), store.ssm[slots]

    (y, state), (want_y, want_state) = decoded(chunkwise_decode), decoded(fast_recurrent)
    error = max(float((y - want_y).abs().max() / want_y.abs().max()),
                float((state - want_state).abs().max() / want_state.abs().max()))
    print(f"chunkwise decode against the recurrence: {error:.2e} of the largest value")
    assert error <= 2e-5, fresh_seed
