"""Logic tests of the SSM scan kernels on CPU through the Triton interpreter: the consistent
scan's phases (prefill, chunked prefill, decodes) agree bit for bit and its backward is the
torch form's; the engine's batched decode is each sequence's segment bits; the fast prefill
and the fast state update are within rounding of the torch forms. They prove logic, not GPU
bits: benchmarks/gpu_kernel_check.py checks the bits on the device. The checks (check_*) run
in a child pytest with TRITON_INTERPRET=1, with the interpreter's tl.dot swapped for a
fixed-order dot (tests/ops/triton/interpreter.py says why).
Negative controls: a decode by another arithmetic, and a doubled state slot, must differ.
"""
import pytest
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from tests.ops.triton.interpreter import SSM, import_kernel, pooled_store, run_checks, with_fixed_order_dot


def test_ssm_scan_kernels_under_the_triton_interpreter(fresh_seed):
    """Runs this module's check_* functions (SSM scan) in a child pytest with TRITON_INTERPRET=1."""
    run_checks(__file__, fresh_seed)


@pytest.fixture(scope="module")
def ssm_triton():
    yield from with_fixed_order_dot("ssm_scan.triton")


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
    of ssm_scan/consistent.py consistent_with), the state carried: every row's y."""
    from kernels.models.mamba_state import MambaSequenceState
    from kernels.ops.ssm_scan import consistent as ssm_scan_consistent
    s = SSM
    state = MambaSequenceState(conv=torch.zeros(1, 1), ssm=torch.zeros(s["heads"], s["head_dim"], s["state"]))
    outputs, start = [], 0  # the inputs may be autograd leaves: slices keep their gradients
    for length, scan in zip(splits, scans):
        rows = slice(start, start + length)
        outputs.append(ssm_scan_consistent.consistent_with(
            scan, inputs["x"][rows], inputs["B"][rows], inputs["C"][rows], inputs["dt_raw"][rows], state,
            inputs["dt_bias"], inputs["A_log"], inputs["D"], chunk_size=s["chunk"]))
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
    from kernels.ops.ssm_scan import consistent as ssm_scan_consistent
    inputs, length = _ssm_inputs(fresh_seed), SSM["length"]
    whole = _ssm_run(inputs, [length], [ssm_triton.consistent])
    mixed = _ssm_run(inputs, [60] + [1] * (length - 60),
                     [ssm_triton.consistent] + [ssm_scan_consistent.torch_scan] * (length - 60))
    assert first_bit_difference(mixed[60:], whole[60:]) is not None, f"control did not differ, seed={fresh_seed}"


def check_ssm_scan_backward_is_the_torch_forms(ssm_triton, fresh_seed):
    """The trainer's gradients through the Triton scan are the torch form's, bit for bit (its
    backward recomputes that form), and the forward keeps the Triton bits."""
    from kernels.ops.ssm_scan import consistent as ssm_scan_consistent
    inputs = _ssm_inputs(fresh_seed)
    leaves = {k: v.clone().requires_grad_(True) for k, v in inputs.items()}
    grads, ys = [], []
    for scan in (ssm_triton.consistent, ssm_scan_consistent.torch_scan):
        y = _ssm_run(leaves, [SSM["length"]], [scan])
        weight = torch.randn(y.shape, generator=torch.Generator().manual_seed(fresh_seed))
        grads.append(torch.autograd.grad((y * weight).sum(), list(leaves.values())))
        ys.append(y.detach())
    for name, ours, torch_form in zip(leaves, *grads):
        assert_bitwise_equal(ours, torch_form, f"d/d{name} seed={fresh_seed}")
    assert_bitwise_equal(ys[0], _ssm_run(inputs, [SSM["length"]], [ssm_triton.consistent]), "forward bits")


def check_ssm_scan_batched_decode_is_the_segment_bits(ssm_triton, fresh_seed):
    """The engine's batched decode (every sequence's new row written into the store's row pool
    after its buffered rows, the kernels run once over all): each sequence's rows equal its
    run alone through one-segment calls, bit for bit, with histories that leave 0, 1, Q-2
    and Q-1 rows buffered (the last one completes its chunk at the first decode and folds it);
    the states after the decodes are equal too. The first 3 decodes run as a decode graph runs
    them (kernels/engine/mamba_tables.py): tables served from static tensors, two padding rows
    on the store's scratch slot, the positions settled afterwards as the capture recorded;
    sequences 3 and 2 complete their chunks there, the others in the plain decodes after.
    The row kernels launched in P-blocks, their loops unrolled, reading 2 values at a time
    instead of 4, give the same bits. Negative
    control: a sequence's slot of the state pool doubled changes its rows, and only its rows
    (an ulp decays away in the chunk)."""
    from kernels.models.batch import Segment
    from kernels.ops.ssm_scan import consistent as ssm_scan_consistent
    from kernels.ops.state_segments import each_segment
    s = SSM
    histories = [s["chunk"], 17, 2 * s["chunk"] - 2, s["chunk"] - 1, 5]
    decodes = 16  # crosses a chunk boundary for every sequence
    sequences = [_ssm_inputs(fresh_seed + i) for i in range(len(histories))]
    shared = {k: sequences[0][k] for k in ("dt_bias", "A_log", "D")}
    alone = [_ssm_run({**inputs, **shared}, [h] + [1] * decodes, [ssm_triton.consistent] * (decodes + 1))
             for inputs, h in zip(sequences, histories)]

    def batched(disturb=None, steps=decodes, served_steps=0):
        store = pooled_store(8, 4, torch.float32)
        store.reserve(len(histories))
        rows = {seq: [] for seq in range(len(histories))}
        for seq, (inputs, h) in enumerate(zip(sequences, histories)):  # each prefilled alone
            segment = (Segment(seq, 0, h, 0, "engine_prefill"),)
            rows[seq].append(each_segment(
                lambda *a, **k: ssm_scan_consistent.consistent_with(ssm_triton.consistent, *a, **k), segment, store,
                tuple(inputs[key][:h] for key in ("x", "B", "C", "dt_raw")), shared["dt_bias"], shared["A_log"],
                shared["D"], chunk_size=s["chunk"]))
            store.settle(segment, keeps_unfinished_chunk=True)  # the model's step after the scan
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
                y = ssm_scan_consistent._consistent_decode_batch(*new, segments, store, shared["dt_bias"],
                                                                 shared["A_log"], shared["D"], chunk_size=s["chunk"],
                                                                 dt_min=0.0)
                store.settle(segments, keeps_unfinished_chunk=True)
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
    ssm_decode = import_kernel("ssm_scan.decode_triton")
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
    slot), then filled with the real rows' slots and buffered counts; the positions settled
    afterwards as the door recorded."""
    from contextlib import ExitStack

    from kernels.engine.mamba_tables import MambaTables
    from kernels.models.batch import Segment
    from kernels.ops.ssm_scan import consistent as ssm_scan_consistent
    size = len(segments) + 2
    tables = MambaTables(lambda: [store], size, "cpu")
    padded = segments + tuple(Segment(-1 - i, 0, 1, len(segments) + i, "engine_graph") for i in range(2))
    g = torch.Generator().manual_seed(seed)
    rows = [torch.cat([t, torch.randn(2, *t.shape[1:], generator=g)]) for t in new]
    with ExitStack() as serving:
        tables.serve(padded, size, serving)
        assert tables.fill(segments, size, [True])
        y = ssm_scan_consistent._consistent_decode_batch(*rows, padded, store, shared["dt_bias"], shared["A_log"],
                                                         shared["D"], chunk_size=chunk_size, dt_min=0.0)
        store.settle(padded, keeps_unfinished_chunk=True)  # the model's step: recorded, not applied
    assert tables.recorded_settles() == [True], "the consistent decode buffers its row"
    tables.settle(segments, tables.recorded_settles())
    return y[:len(segments)]


def check_ssm_scan_fast_prefill_folds_every_row(ssm_triton, fresh_seed):
    """The fast contract's CUDA prefill (fold_all: chunks from the call's row 0, the last partial
    chunk folded through zero-dt padding): every row's y and the state after all rows within
    1e-5 of the torch form's run_chunks (printed); it claims no bits."""
    from kernels.ops.ssm_scan.forms import run_chunks
    inputs, s = _ssm_inputs(fresh_seed), SSM
    dt = torch.nn.functional.softplus(inputs["dt_raw"] + inputs["dt_bias"])
    rows, A = [inputs["x"], inputs["B"], inputs["C"], dt], -torch.exp(inputs["A_log"])
    state0 = torch.randn(s["heads"], s["head_dim"], s["state"], generator=torch.Generator().manual_seed(fresh_seed))
    y, end = ssm_triton.fold_all(rows, state0, A, inputs["D"], chunk_size=s["chunk"], first_row=3)
    y_torch, _, end_torch = run_chunks(rows, state0, A, inputs["D"], s["chunk"])
    errors = [float((a - b).abs().max() / b.abs().max()) for a, b in ((y, y_torch[3:]), (end, end_torch))]
    print(f"fast prefill (Triton) vs torch form: y {errors[0]:.2e}, end state {errors[1]:.2e}")
    assert y.shape == y_torch[3:].shape and max(errors) < 1e-5, (errors, fresh_seed)


def check_fast_state_update_is_the_recurrence(fresh_seed):
    """The fast decode's one-pass kernel (kernels/ops/ssm_scan/fast_triton.py) against the torch
    recurrence it replaces: outputs and the state written back in place at each sequence's
    slot, other slots untouched (a fast path: close to the torch form, not its bits)."""
    kernel = import_kernel("ssm_scan.fast_triton")
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
