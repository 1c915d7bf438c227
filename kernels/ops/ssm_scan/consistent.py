"""ssm_scan.consistent: chunks of Q rows at absolute positions, the unfinished chunk buffered and
re-played zero-padded to Q rows (one GEMM shape), S folded when a chunk completes; on CUDA the
Triton kernels (triton.py, decode_triton.py), a decode-only group in one go.
"""
import torch

from kernels.ops.activation.consistent import position_independent_softplus
from kernels.ops.ssm_scan.forms import _rows, run_chunks
from kernels.ops.ssm_scan.forms import chunk_outputs as _chunk_outputs
from kernels.ops.ssm_scan.forms import end_state as _end_state
from kernels.ops.state_segments import batched_decode, each_segment


def torch_scan(rows, state0, A, D, *, chunk_size, first_row):
    """The chunked form in torch ops: (y of rows[first_row:], the state at the last boundary)."""
    y, boundary, _ = run_chunks(rows, state0, A, D, chunk_size)
    return y[first_row:], boundary


def scan_for(device):
    """The consistent scan's backend: the torch form, or on CUDA the Triton kernels
    (kernels/ops/ssm_scan/triton.py: the same terms, a few launches instead of ~50 ops)."""
    if device.type == "cuda":
        import kernels.ops.ssm_scan.triton as ssm_scan_triton  # imports Triton: CUDA machines only
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
    the Triton kernels re-play each sequence's chunk there (triton.py's decode_batch): a
    row's terms and order are those of consistent_segment's kernels."""
    import kernels.ops.ssm_scan.triton as ssm_scan_triton  # imports Triton: CUDA machines only
    slots, buffered = _write_new_rows(x, B, C, dt_raw, segments, store, dt_bias, dt_min)
    return ssm_scan_triton.decode_batch(store.rows, store.ssm, slots, buffered, -torch.exp(A_log.float()), D,
                                        chunk_size=chunk_size)


def _consistent_decode_batch_cpu(x, B, C, dt_raw, segments, store, dt_bias, A_log, D, *, chunk_size, dt_min):
    """_consistent_decode_batch in torch ops: every sequence's chunk (its buffered rows and the
    new one) re-played by one chunk() call with a leading sequence dim, the new rows' outputs
    kept, and the states of the chunks that complete folded. Pool rows past the new one are
    an earlier chunk's: they reach the new row only through terms the causal mask zeroes, and
    are replaced by consistent_segment's zero padding anyway (a stale inf times 0 is a NaN).
    Only the sequences whose chunk completes fold their state (the fold was three quarters of
    the re-play's time). Each sequence's GEMMs are entries of one batched call whose count
    follows the batch: the bits equal a lone sequence's because forms.chunk_outputs gives every
    entry one layout, alone or batched, and MKL's batched GEMM reduces every entry alike, a
    measured fact (tests/models/test_ssm.py, gates C02 and C03), not a law."""
    slots, buffered = _write_new_rows(x, B, C, dt_raw, segments, store, dt_bias, dt_min)
    pools = store.row_pools()
    live = torch.arange(chunk_size, device=x.device)[None, :] <= buffered[:, None]  # [S, Q]
    rows = [torch.where(live.view(live.shape + (1,) * (pool.dim() - 2)), pool[slots], 0.0) for pool in pools]
    state0 = store.ssm[slots]
    y, fold = _chunk_outputs(*rows, state0, -torch.exp(A_log.float()), D.float())
    completes = (buffered + 1 == chunk_size).nonzero()[:, 0]
    if completes.numel():  # only a completed chunk's state is kept: fold just those sequences
        store.ssm[slots[completes]] = _end_state(*(part[completes] for part in fold), state0[completes])
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
    rest = [r[num_complete:] for r in rows]
    state.pending = rest if rest[0].shape[0] else None
    return y
