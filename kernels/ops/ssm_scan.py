"""Mamba-2 SSD scan per head: S_t = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T, y_t = S_t C_t + D x_t.

dt = max(softplus(dt_raw + dt_bias), dt_min), A = -exp(A_log), S in fp32, in chunks of Q rows at
absolute positions (0, Q, 2Q, ...). Consistency: a sequence keeps S at its last chunk boundary and
the unfinished chunk's rows; a call re-plays that chunk zero-padded to Q rows (one GEMM shape) and
folds S when it completes. Row t never reads later rows (sequential cumsum, masked terms selected
away, padding adds exact zeros), so prefill, any chunk split, decode and the trainer agree. Fast:
chunks from the call's first row, or the recurrence. Reference: gates/reference/ssm.py.
"""
import torch
import torch.nn.functional as F

from kernels.ops.autograd_use import records_graph
from kernels.ops.ssm_scan_chunks import chunk_outputs as _chunk_outputs
from kernels.ops.ssm_scan_chunks import end_state as _end_state
from kernels.ops.ssm_scan_chunks import run_chunks
from kernels.ops.state_segments import batched_decode, each_segment


def position_independent_softplus(x):
    """softplus with torch's threshold (x > 20 -> x), from exp and log, whose vector and
    scalar loops agree on CPU (F.softplus's do not)."""
    return torch.where(x > 20.0, x, torch.log(1.0 + torch.exp(x)))


def _rows(state, x, B, C, dt):
    """The unfolded rows (buffered, then new) in fp32."""
    new = [x.float(), B.float(), C.float(), dt]
    if state.pending is None:
        return new
    return [torch.cat([old, fresh]) for old, fresh in zip(state.pending, new)]


def torch_scan(rows, state0, A, D, *, chunk_size, first_row):
    """The chunked form in torch ops: (y of rows[first_row:], the state at the last boundary)."""
    y, boundary, _ = run_chunks(rows, state0, A, D, chunk_size)
    return y[first_row:], boundary


def scan_for(device):
    """The consistent scan's backend: the torch form, or on CUDA the Triton kernels
    (kernels/ops/ssm_scan_triton.py: the same terms, a few launches instead of ~50 ops)."""
    if device.type == "cuda":
        from kernels.ops import ssm_scan_triton  # imports Triton: CUDA machines only
        return ssm_scan_triton.consistent
    return torch_scan


def consistent(x, B, C, dt_raw, segments, store, dt_bias, A_log, D, *, chunk_size, dt_min=0.0):
    """Chunks at absolute positions; the unfinished chunk is buffered and re-played."""
    if batched_decode(segments, store):
        decode = _consistent_decode_batch if x.device.type == "cuda" else _consistent_decode_batch_cpu
        return decode(x, B, C, dt_raw, segments, store, dt_bias, A_log, D, chunk_size=chunk_size, dt_min=dt_min)
    return each_segment(consistent_segment, segments, store, (x, B, C, dt_raw), dt_bias, A_log, D,
                        chunk_size=chunk_size, dt_min=dt_min)


def consistent_segment(x, B, C, dt_raw, state, dt_bias, A_log, D, *, chunk_size, dt_min=0.0):
    """One segment's consistent scan on its sequence's state."""
    return consistent_with(scan_for(x.device), x, B, C, dt_raw, state, dt_bias, A_log, D,
                           chunk_size=chunk_size, dt_min=dt_min)


def _write_new_rows(x, B, C, dt_raw, segments, store, dt_bias, dt_min):
    """Every sequence's one new row (x, B, C, dt in fp32) written after its buffered rows in
    the store's row pools; the (slots, buffered counts) it was written at."""
    dt = position_independent_softplus(dt_raw.float() + dt_bias.float()).clamp(min=dt_min)
    slots, buffered = store.decode_tables(segments)
    for pool, new in zip(store.row_pools(), (x.float(), B.float(), C.float(), dt)):
        pool[slots, buffered] = new
    return slots, buffered


def _consistent_decode_batch(x, B, C, dt_raw, segments, store, dt_bias, A_log, D, *, chunk_size, dt_min):
    """Every sequence's one new row written after its buffered rows in the store's pools, then
    the Triton kernels re-play each sequence's chunk there (ssm_scan_triton.decode_batch): a
    row's terms and order are those of consistent_segment's kernels."""
    from kernels.ops import ssm_scan_triton  # imports Triton: CUDA machines only
    slots, buffered = _write_new_rows(x, B, C, dt_raw, segments, store, dt_bias, dt_min)
    y = ssm_scan_triton.decode_batch(store.rows, store.ssm, slots, buffered, -torch.exp(A_log.float()), D,
                                     chunk_size=chunk_size)
    store.advance(segments, buffered=True)
    return y


def _consistent_decode_batch_cpu(x, B, C, dt_raw, segments, store, dt_bias, A_log, D, *, chunk_size, dt_min):
    """_consistent_decode_batch in torch ops: every sequence's chunk (its buffered rows and the
    new one) re-played by one chunk() call with a leading sequence dim, the new rows' outputs
    kept, and the states of the chunks that complete folded. Pool rows past the new one are
    an earlier chunk's: they reach the new row only through terms the causal mask zeroes, and
    are replaced by consistent_segment's zero padding anyway (a stale inf times 0 is a NaN).
    Only the sequences whose chunk completes fold their state (the fold was three quarters of
    the re-play's time). Each sequence's GEMMs are entries of one batched call whose count
    follows the batch: the bits equal a lone sequence's because MKL's batched GEMM reduces
    every entry alike, a measured fact (tests/test_ssm.py, gates C02 and C03), not a law."""
    slots, buffered = _write_new_rows(x, B, C, dt_raw, segments, store, dt_bias, dt_min)
    pools = store.row_pools()
    live = torch.arange(chunk_size, device=x.device)[None, :] <= buffered[:, None]  # [S, Q]
    rows = [torch.where(live.view(live.shape + (1,) * (pool.dim() - 2)), pool[slots], 0.0) for pool in pools]
    state0 = store.ssm[slots]
    y, fold = _chunk_outputs(*rows, state0, -torch.exp(A_log.float()), D.float())
    completes = (buffered + 1 == chunk_size).nonzero()[:, 0]
    if completes.numel():  # only a completed chunk's state is kept: fold just those sequences
        store.ssm[slots[completes]] = _end_state(*(part[completes] for part in fold), state0[completes])
    store.advance(segments, buffered=True)
    return y[torch.arange(len(segments), device=x.device), buffered]


def consistent_with(scan, x, B, C, dt_raw, state, dt_bias, A_log, D, *, chunk_size, dt_min=0.0):
    """consistent() with the scan backend given (the Triton checks run the CUDA one on the CPU)."""
    dt = position_independent_softplus(dt_raw.float() + dt_bias.float()).clamp(min=dt_min)
    A = -torch.exp(A_log.float())
    rows = _rows(state, x, B, C, dt)
    num_buffered = rows[0].shape[0] - x.shape[0]
    y, boundary = scan(rows, state.ssm, A, D, chunk_size=chunk_size, first_row=num_buffered)
    num_complete = (rows[0].shape[0] // chunk_size) * chunk_size
    state.ssm = boundary
    state.folded += num_complete
    rest = [r[num_complete:] for r in rows]
    state.pending = rest if rest[0].shape[0] else None
    return y


def fast_chunked(x, B, C, dt_raw, segments, store, dt_bias, A_log, D, *, chunk_size, dt_min=0.0):
    """Engine prefill: chunks start at this call's first row; everything is folded."""
    return each_segment(_chunked, segments, store, (x, B, C, dt_raw), dt_bias, A_log, D,
                        chunk_size=chunk_size, dt_min=dt_min)


def _chunked(x, B, C, dt_raw, state, dt_bias, A_log, D, *, chunk_size, dt_min):
    dt, A = F.softplus(dt_raw.float() + dt_bias.float()).clamp(min=dt_min), -torch.exp(A_log.float())
    rows = _rows(state, x, B, C, dt)
    num_buffered = rows[0].shape[0] - x.shape[0]
    if x.device.type == "cuda" and not records_graph(*rows, state.ssm, A, D):
        from kernels.ops import ssm_scan_triton  # the engine's prefill as engines run it: chunk kernels
        y, end = ssm_scan_triton.fold_all(rows, state.ssm, A, D, chunk_size=chunk_size, first_row=num_buffered)
    else:
        y, _, end = run_chunks(rows, state.ssm, A, D, chunk_size)
        y = y[num_buffered:]
    state.ssm, state.folded, state.pending = end, state.folded + rows[0].shape[0], None
    return y


def fast_recurrent(x, B, C, dt_raw, segments, store, dt_bias, A_log, D, *, chunk_size, dt_min=0.0):
    """Engine decode: the one-step state update per token (buffered rows first); a decode-only
    group on a pooled store updates every sequence's state in one go, as engines batch it
    (segment by segment when a consistent prefill left rows buffered: a planted mix)."""
    if batched_decode(segments, store) and not store.holds_buffered_rows(segments):
        return _recurrent_batch(x, B, C, dt_raw, segments, store, dt_bias, A_log, D, dt_min=dt_min)
    return each_segment(_recurrent, segments, store, (x, B, C, dt_raw), dt_bias, A_log, D, dt_min=dt_min)


def _recurrent(x, B, C, dt_raw, state, dt_bias, A_log, D, *, dt_min):
    dt, A = F.softplus(dt_raw.float() + dt_bias.float()).clamp(min=dt_min), -torch.exp(A_log.float())
    rows = _rows(state, x, B, C, dt)
    num_heads, num_groups = rows[0].shape[1], rows[1].shape[1]
    s, A32, D32 = state.ssm, A, D.float()
    outputs = []
    for xt, bt, ct, dtt in zip(*rows):
        bh = bt.repeat_interleave(num_heads // num_groups, dim=0)  # [H, N]
        ch = ct.repeat_interleave(num_heads // num_groups, dim=0)
        s = torch.exp(dtt * A32)[:, None, None] * s + (dtt[:, None] * xt)[:, :, None] * bh[:, None, :]
        outputs.append((s * ch[:, None, :]).sum(dim=-1) + D32[:, None] * xt)
    state.ssm, state.folded, state.pending = s, state.folded + rows[0].shape[0], None
    return torch.stack(outputs)[rows[0].shape[0] - x.shape[0]:]


def _recurrent_batch(x, B, C, dt_raw, segments, store, dt_bias, A_log, D, *, dt_min):
    """One step of every sequence [b] at once: states [b, H, P, N] gathered by slot, put back."""
    dt, A = F.softplus(dt_raw.float() + dt_bias.float()).clamp(min=dt_min), -torch.exp(A_log.float())
    slots = store.decode_slots(segments)
    if x.is_cuda:  # one pass over the state, in place (kernels/ops/ssm_update_triton.py)
        from kernels.ops.ssm_update_triton import state_update  # imports Triton: CUDA machines only
        y = state_update(store.ssm, slots, x, B, C, dt, A, D)
        store.advance(segments, buffered=False)
        return y
    per_group = x.shape[1] // B.shape[1]
    bh, ch = (t.float().repeat_interleave(per_group, dim=1) for t in (B, C))  # [b, H, N]
    xf = x.float()
    s = torch.exp(dt * A)[:, :, None, None] * store.ssm[slots] + (dt[:, :, None] * xf)[..., None] * bh[:, :, None, :]
    store.ssm[slots] = s
    store.advance(segments, buffered=False)
    return (s * ch[:, :, None, :]).sum(dim=-1) + D.float()[:, None] * xf
