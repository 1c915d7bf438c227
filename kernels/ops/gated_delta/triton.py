"""The consistent Gated DeltaNet on CUDA: one Triton kernel that walks rows, the same for the
trainer, prefill, chunked prefill and decode (consistent.py's backend on CUDA).

forms.chunk's UT transform solved row by row: with c_t = c_{t-1} + g_t from the chunk's start
and S0 the state there, a_ts = b_t (k_t . k_s) exp(c_t - c_s) (s < t), u_t = b_t v_t -
sum_s a_ts u_s, w_t = b_t exp(c_t) k_t - sum_s a_ts w_s, n_t = u_t - w_t S0, y_t = exp(c_t) q_t S0
+ sum_{s<=t} (q_t . k_s) exp(c_t - c_s) n_s, and when the chunk completes S = exp(c_Q) S0 +
sum_s exp(c_Q - c_s) k_s n_s^T, s in order. One program per (sequence, head) walks its new rows
from its place in the chunk, the chunk's earlier rows' k, c, u, w, n read from the kept-row pools
(forms.KEPT) and its own written there: a decode step computes its one row, O(Q (K + V) + K V),
not a re-play of the chunk; a call across chunks solves c, u, w for all its chunks at once, then
applies them in order (the modes below). Consistency: every phase runs this kernel with the same
tiles, each sum over all Q slots (those a row may not read masked: exact zeros, no memory read)
or over K: a row's bits do not depend on how many rows a call walks. A decode step reads S and
the chunk's earlier rows and writes its row (S only when it completes the chunk): about the bytes
of the recurrent step, which reads and writes S. Backward: forms.chunk's torch form (C08's
tolerance).
"""
import torch
import triton
import triton.language as tl

from kernels.ops.autograd_use import grads_of_recomputed, records_graph
from kernels.ops.chunk_scan import run_chunks
from kernels.ops.gated_delta.forms import DeltaState, chunk, kept_row_shapes

WALK, SOLVE, APPLY = 0, 1, 2
_SOLVE, _APPLY = tl.constexpr(SOLVE), tl.constexpr(APPLY)  # what the kernel reads
"""The kernel's modes: WALK does each row whole (decode; a call inside one chunk); a longer call runs
SOLVE (c, u, w: they do not read S, so one program per chunk, all at once) then APPLY (n, y and the
fold, chunk after chunk). One compiled kernel (the mode is not specialised): SOLVE runs WALK's code
for c, u, w and APPLY WALK's code for n, y and S, so the bits are WALK's."""


@triton.jit(do_not_specialize=["mode"])
def _delta_rows_kernel(q_ptr, k_ptr, v_ptr, g_ptr, b_ptr, y_ptr, meta_ptr, kk_ptr, kc_ptr, ku_ptr, kw_ptr, kn_ptr,
                       s_ptr, mode, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, Q: tl.constexpr):
    # meta [B, 5] int64 per program's rows: the first, how many, the slot of their chunk in the
    # pools, their place in it (rows kept before the first), the index of the state S in s_ptr.
    # APPLY moves to the next slot when a chunk completes (SOLVE left chunk j in slot j).
    seq, h = tl.program_id(0), tl.program_id(1)
    first, count = tl.load(meta_ptr + seq * 5), tl.load(meta_ptr + seq * 5 + 1)
    slot, place = tl.load(meta_ptr + seq * 5 + 2), tl.load(meta_ptr + seq * 5 + 3)
    rk, rv, rq = tl.arange(0, K), tl.arange(0, V), tl.arange(0, Q)
    state_ptrs = s_ptr + (tl.load(meta_ptr + seq * 5 + 4) * H + h) * K * V + rk[:, None] * V + rv[None, :]
    state = tl.zeros((K, V), dtype=tl.float32)
    if mode != _SOLVE:
        state = tl.load(state_ptrs)  # [K, V]
    c_prev = tl.load(kc_ptr + (slot * Q + tl.maximum(place - 1, 0)) * H + h)
    c_prev = tl.where(place > 0, c_prev, 0.0)
    for i in range(count):
        row = (first + i) * H + h
        slot_rows = (slot * Q + rq) * H + h  # [Q] the chunk's rows in the kept-row pools
        this = (slot * Q + place) * H + h
        if mode == _APPLY:  # SOLVE's c, u, w
            c_t, u_t, w_t = tl.load(kc_ptr + this), tl.load(ku_ptr + this * V + rv), tl.load(kw_ptr + this * K + rk)
        else:
            k_t, v_t = tl.load(k_ptr + row * K + rk), tl.load(v_ptr + row * V + rv)
            g_t, b_t = tl.load(g_ptr + row), tl.load(b_ptr + row)
            c_t = c_prev + g_t
            earlier = rq < place
            k_s = tl.load(kk_ptr + slot_rows[:, None] * K + rk[None, :], mask=earlier[:, None], other=0.0)
            c_s = tl.load(kc_ptr + slot_rows, mask=earlier, other=0.0)
            dots = tl.sum(k_t[None, :] * k_s, axis=1)
            a = tl.where(earlier, b_t * dots * tl.exp(tl.where(earlier, c_t - c_s, float("-inf"))), 0.0)
            u_s = tl.load(ku_ptr + slot_rows[:, None] * V + rv[None, :], mask=earlier[:, None], other=0.0)
            u_t = b_t * v_t - tl.sum(a[:, None] * u_s, axis=0)
            w_s = tl.load(kw_ptr + slot_rows[:, None] * K + rk[None, :], mask=earlier[:, None], other=0.0)
            w_t = b_t * (tl.exp(c_t) * k_t) - tl.sum(a[:, None] * w_s, axis=0)
            tl.store(kk_ptr + this * K + rk, k_t)
            tl.store(kc_ptr + this, c_t)
            tl.store(ku_ptr + this * V + rv, u_t)
            tl.store(kw_ptr + this * K + rk, w_t)
        if mode != _SOLVE:
            tl.store(kn_ptr + this * V + rv, u_t - tl.sum(w_t[:, None] * state, axis=0))
        tl.debug_barrier()  # the row is read back below and by the next rows, by other threads
        if mode != _SOLVE:
            q_t = tl.load(q_ptr + row * K + rk)
            reads = rq <= place
            k_s = tl.load(kk_ptr + slot_rows[:, None] * K + rk[None, :], mask=reads[:, None], other=0.0)
            c_s = tl.load(kc_ptr + slot_rows, mask=reads, other=0.0)
            n_s = tl.load(kn_ptr + slot_rows[:, None] * V + rv[None, :], mask=reads[:, None], other=0.0)
            scores = tl.sum(q_t[None, :] * k_s, axis=1) * tl.exp(tl.where(reads, c_t - c_s, float("-inf")))
            scores = tl.where(reads, scores, 0.0)
            y_t = tl.exp(c_t) * tl.sum(q_t[:, None] * state, axis=0) + tl.sum(scores[:, None] * n_s, axis=0)
            tl.store(y_ptr + row * V + rv, y_t)
        place += 1
        c_prev = c_t
        if place == Q:  # the chunk completes: fold it into S, slot by slot in order
            if mode != _SOLVE:
                state = tl.exp(c_t) * state
                for s in range(Q):
                    kept = (slot * Q + s) * H + h
                    decayed = tl.load(kk_ptr + kept * K + rk) * tl.exp(c_t - tl.load(kc_ptr + kept))
                    state += decayed[:, None] * tl.load(kn_ptr + kept * V + rv)[None, :]
                tl.store(state_ptrs, state)  # only here: a step that folds nothing writes no S
            place -= Q
            c_prev = c_t - c_t  # +0: the next chunk's c starts as a decode's at place 0
            slot += (mode == _APPLY).to(tl.int64)
            tl.debug_barrier()  # WALK's next row overwrites slot 0, read above


def _require(q, v, chunk_size):
    dims = {"key dim": q.shape[-1], "value dim": v.shape[-1], "chunk size": chunk_size}
    odd = {name: size for name, size in dims.items() if size & (size - 1) or size < 2}
    if odd:
        raise ValueError(f"the consistent gated_delta kernel tiles powers of two >= 2; got {odd}")


def _launch(mode, rows, meta, pools, state_pool, y, chunk_size):
    q, k, v, g, beta = rows
    num_heads = v.shape[1]
    _delta_rows_kernel[(meta.shape[0], num_heads)](q, k, v, g, beta, y, meta, *pools, state_pool, mode, H=num_heads,
                                                   K=q.shape[-1], V=v.shape[-1], Q=chunk_size, num_warps=8)


def _prepared(rows, chunk_size):
    _require(rows[0], rows[2], chunk_size)
    return tuple(t.contiguous() for t in rows)


def decode_pooled(q, k, v, g, beta, slots, held, pools, state_pool, *, chunk_size: int):
    """One prepared row per sequence [S, H, *] at place `held` [S] of its chunk, on the engine's
    pools (KEPT's [slots, Q, H, *], S [slots, H, K, V], updated in place): tensor ops and one WALK
    launch (a decode graph captures it). y [S, H, V] fp32."""
    rows = _prepared((q, k, v, g, beta), chunk_size)
    meta = torch.stack((torch.arange(slots.shape[0], device=slots.device), torch.ones_like(slots), slots, held,
                        slots), dim=1)
    y = torch.empty_like(rows[2])
    _launch(WALK, rows, meta, pools, state_pool, y, chunk_size)
    return y


def _sequence(q, k, v, g, beta, state: DeltaState, chunk_size: int):
    """One sequence's new prepared rows after `state` (kept rows: KEPT's): (y, the state after).
    Rows within one chunk: a WALK on pools of one slot. Across chunks: SOLVE over every chunk at once
    into pools of a slot per chunk, then APPLY from the first."""
    rows = _prepared((q, k, v, g, beta), chunk_size)
    num_kept, num_new = 0 if state.pending is None else state.pending[0].shape[0], q.shape[0]
    total = num_kept + num_new
    num_chunks = -(-total // chunk_size)
    shapes = kept_row_shapes(v.shape[1], q.shape[-1], v.shape[-1])
    pools = [torch.zeros(num_chunks, chunk_size, *shape, dtype=torch.float32, device=q.device) for shape in shapes]
    for pool, kept in zip(pools, state.pending or ()):
        pool[0, :num_kept] = kept
    state_pool = state.ssm[None].float().clone()
    y = torch.empty_like(rows[2])
    whole = torch.tensor([[0, num_new, 0, num_kept, 0]], dtype=torch.int64).to(q.device)  # every row from slot 0
    if num_chunks == 1:
        _launch(WALK, rows, whole, pools, state_pool, y, chunk_size)
    else:
        starts = [max(j * chunk_size, num_kept) for j in range(num_chunks)]
        per_chunk = torch.tensor([[start - num_kept, min((j + 1) * chunk_size, total) - start, j,
                                   start - j * chunk_size, 0] for j, start in enumerate(starts)], dtype=torch.int64)
        _launch(SOLVE, rows, per_chunk.to(q.device), pools, state_pool, y, chunk_size)
        _launch(APPLY, rows, whole, pools, state_pool, y, chunk_size)
    left = total % chunk_size
    pending = tuple(pool[num_chunks - 1, :left].clone() for pool in pools) if left else None
    return y, DeltaState(state_pool[0], state.folded + total - left, pending)


class ConsistentRows(torch.autograd.Function):
    """Forward: the row kernel from S0 at a sequence's first row. Backward: forms.chunk's torch form
    at the same chunk boundaries, recomputed in fp32 and differentiated (the same function in exact
    arithmetic). Outputs: y, then the state after (S and the kept rows: no gradient)."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, state0, chunk_size):
        ctx.save_for_backward(q, k, v, g, beta, state0)
        ctx.chunk_size = chunk_size
        y, after = _sequence(q, k, v, g, beta, DeltaState(state0), chunk_size)
        state_out = (after.ssm, *(after.pending or ()))
        ctx.mark_non_differentiable(*state_out)
        return (y, *state_out)

    @staticmethod
    def backward(ctx, grad_y, *_state_grads):
        def torch_form(q, k, v, g, beta, state0):
            return run_chunks(chunk, (q, k, v, g, beta), state0, ctx.chunk_size)[0]
        return grads_of_recomputed(ctx.saved_tensors, ctx.needs_input_grad, torch_form, grad_y) + (None,)


def consistent(q, k, v, g, beta, state: DeltaState, *, chunk_size: int):
    """One sequence's prepared rows [T, H, *] after `state`: (y [T, H, V] fp32, the state after)."""
    if not records_graph(q, k, v, g, beta, state.ssm):
        return _sequence(q, k, v, g, beta, state, chunk_size)
    if state.pending is not None or state.folded:
        kept = 0 if state.pending is None else state.pending[0].shape[0]
        raise ValueError("the consistent gated_delta backward differentiates a sequence from its first row; "
                         f"this call starts at row {state.folded + kept}")
    y, ssm, *pending = ConsistentRows.apply(q, k, v, g, beta, state.ssm, chunk_size)
    total = q.shape[0]
    return y, DeltaState(ssm, total - total % chunk_size, tuple(pending) if pending else None)
