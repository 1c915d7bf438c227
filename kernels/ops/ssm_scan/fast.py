"""ssm_scan's fast variants, as engines run them: prefill in chunks from the call's first row,
everything folded (on CUDA the chunk kernels, triton.py), and decode by the one-step recurrence
(on CUDA one pass over the state, fast_triton.py).
"""
import torch
import torch.nn.functional as F

from kernels.ops.autograd_use import records_graph
from kernels.ops.ssm_scan.forms import _rows, run_chunks
from kernels.ops.state_segments import batched_decode, each_segment


def fast_chunked(x, B, C, dt_raw, segments, store, dt_bias, A_log, D, *, chunk_size, dt_min=0.0):
    """Engine prefill: chunks start at this call's first row; everything is folded."""
    return each_segment(_chunked, segments, store, (x, B, C, dt_raw), dt_bias, A_log, D,
                        chunk_size=chunk_size, dt_min=dt_min)


def _chunked(x, B, C, dt_raw, state, dt_bias, A_log, D, *, chunk_size, dt_min):
    dt, A = F.softplus(dt_raw.float() + dt_bias.float()).clamp(min=dt_min), -torch.exp(A_log.float())
    rows = _rows(state, x, B, C, dt)
    num_buffered = rows[0].shape[0] - x.shape[0]
    if x.device.type == "cuda" and not records_graph(*rows, state.ssm, A, D):
        import kernels.ops.ssm_scan.triton as ssm_scan_triton  # the engine's prefill as engines run it: chunk kernels
        y, end = ssm_scan_triton.fold_all(rows, state.ssm, A, D, chunk_size=chunk_size, first_row=num_buffered)
    else:
        y, _, end = run_chunks(rows, state.ssm, A, D, chunk_size)
        y = y[num_buffered:]
    state.ssm, state.pending = end, None
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
    state.ssm, state.pending = s, None
    return torch.stack(outputs)[rows[0].shape[0] - x.shape[0]:]


def _recurrent_batch(x, B, C, dt_raw, segments, store, dt_bias, A_log, D, *, dt_min):
    """One step of every sequence [b] at once: states [b, H, P, N] gathered by slot, put back."""
    dt, A = F.softplus(dt_raw.float() + dt_bias.float()).clamp(min=dt_min), -torch.exp(A_log.float())
    slots = store.decode_slots(segments)
    if x.is_cuda:  # one pass over the state, in place (kernels/ops/ssm_scan/fast_triton.py)
        from kernels.ops.ssm_scan.fast_triton import state_update  # imports Triton: CUDA machines only
        return state_update(store.ssm, slots, x, B, C, dt, A, D)
    per_group = x.shape[1] // B.shape[1]
    bh, ch = (t.float().repeat_interleave(per_group, dim=1) for t in (B, C))  # [b, H, N]
    xf = x.float()
    s = torch.exp(dt * A)[:, :, None, None] * store.ssm[slots] + (dt[:, :, None] * xf)[..., None] * bh[:, :, None, :]
    store.ssm[slots] = s
    return (s * ch[:, :, None, :]).sum(dim=-1) + D.float()[:, None] * xf
