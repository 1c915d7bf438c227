"""The consistent Gated DeltaNet on CUDA: one Triton kernel that walks rows, the same for the
trainer, prefill, chunked prefill and decode (consistent.py's backend on CUDA).

forms.chunk's UT transform solved row by row: with c_t = c_{t-1} + g_t from the chunk's start
and S0 the state there, a_ts = b_t (k_t . k_s) exp(c_t - c_s) (s < t), u_t = b_t v_t -
sum_s a_ts u_s, w_t = b_t exp(c_t) k_t - sum_s a_ts w_s, n_t = u_t - w_t S0, y_t = exp(c_t) q_t S0
+ sum_{s<=t} (q_t . k_s) exp(c_t - c_s) n_s, and when the chunk completes S = exp(c_Q) S0 +
sum_s exp(c_Q - c_s) k_s n_s^T, s in order. A program per (sequence, head) walks its new rows
from its place in the chunk, the chunk's earlier rows' k, c, u, w, n read from the kept-row pools
(forms.KEPT) and its own written there: a decode step computes its one row, O(Q (K + V) + K V),
not a re-play of the chunk. A prefill or the trainer splits the walk into three passes over all
their sequences at once (the modes below): only n and the fold go chunk after chunk.
Consistency: every phase runs this kernel with the same tiles, each sum over all Q slots (those a
row may not read masked: exact zeros, no memory read) or over K: a row's bits do not depend on
how many rows or sequences a call walks. A decode step reads S and
the chunk's earlier rows and writes its row (S only when it completes the chunk): about the bytes
of the recurrent step, which reads and writes S. Backward: forms.chunk's torch form (C08's
tolerance).
"""
from itertools import accumulate

import torch
import triton
import triton.language as tl

from kernels.ops.autograd_use import grads_of_recomputed, records_graph
from kernels.ops.chunk_scan import run_chunks
from kernels.ops.gated_delta.forms import DeltaState, chunk, kept_row_shapes

SOLVES, NS, YS = 1, 2, 4  # the parts of a row a launch computes: c, u, w; n (and the fold); y
WALK, SOLVE, STATES, OUTPUT = SOLVES | NS | YS, SOLVES, NS, YS
_SOLVES, _NS, _YS = tl.constexpr(SOLVES), tl.constexpr(NS), tl.constexpr(YS)  # what the kernel reads
"""The kernel's modes, sets of parts: WALK does each row whole (decode; a call inside one chunk). A
longer call runs three passes of the same compiled kernel (the mode is not specialised), each
running WALK's code for its part, so the bits are WALK's: SOLVE (c, u, w do not read S: a program
per (chunk, head), all chunks at once), STATES (n = u - w S0 and the fold, chunk after chunk: a
program per (sequence, head) that keeps each chunk's S0) and OUTPUT (y needs only its chunk's S0
and rows: a program per (chunk, head) again)."""


@triton.jit(do_not_specialize=["mode"])
def _delta_rows_kernel(q_ptr, k_ptr, v_ptr, g_ptr, b_ptr, y_ptr, meta_ptr, kk_ptr, kc_ptr, ku_ptr, kw_ptr, kn_ptr,
                       s_ptr, mode, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, Q: tl.constexpr):
    # meta [B, 5] int64 per program's rows: the first, how many, the slot of their chunk in the
    # pools, their place in it (rows kept before the first), the index of the state S in s_ptr.
    # STATES and OUTPUT move to the next slot when a chunk completes (SOLVE left chunk j in slot
    # j); STATES writes each chunk's end state at the next index (WALK: in place).
    seq, h = tl.program_id(0), tl.program_id(1)
    first, count = tl.load(meta_ptr + seq * 5), tl.load(meta_ptr + seq * 5 + 1)
    slot, place = tl.load(meta_ptr + seq * 5 + 2), tl.load(meta_ptr + seq * 5 + 3)
    state_index = tl.load(meta_ptr + seq * 5 + 4)
    rk, rv, rq = tl.arange(0, K), tl.arange(0, V), tl.arange(0, Q)
    state = tl.zeros((K, V), dtype=tl.float32)
    if (mode & (_NS | _YS)) != 0:
        state = tl.load(s_ptr + (state_index * H + h) * K * V + rk[:, None] * V + rv[None, :])  # [K, V]
    c_prev = tl.load(kc_ptr + (slot * Q + tl.maximum(place - 1, 0)) * H + h)
    c_prev = tl.where(place > 0, c_prev, 0.0)
    for i in range(count):
        row = (first + i) * H + h
        slot_rows = (slot * Q + rq) * H + h  # [Q] the chunk's rows in the kept-row pools
        this = (slot * Q + place) * H + h
        if (mode & _SOLVES) == 0:  # SOLVE's c, u, w
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
        if (mode & _NS) != 0:
            tl.store(kn_ptr + this * V + rv, u_t - tl.sum(w_t[:, None] * state, axis=0))
        tl.debug_barrier()  # the row is read back below and by the next rows, by other threads
        if (mode & _YS) != 0:
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
            if (mode & _NS) != 0:
                state = tl.exp(c_t) * state
                for s in range(Q):
                    kept = (slot * Q + s) * H + h
                    decayed = tl.load(kk_ptr + kept * K + rk) * tl.exp(c_t - tl.load(kc_ptr + kept))
                    state += decayed[:, None] * tl.load(kn_ptr + kept * V + rv)[None, :]
                state_index += ((mode & _SOLVES) == 0).to(tl.int64)
                tl.store(s_ptr + (state_index * H + h) * K * V + rk[:, None] * V + rv[None, :], state)
            place -= Q
            c_prev = c_t - c_t  # +0: the next chunk's c starts as a decode's at place 0
            slot += ((mode & _SOLVES) == 0).to(tl.int64)
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


def _chunk_meta(kept: int, new: int, first: int, slot: int, state_index: int, chunk_size: int) -> list:
    """SOLVE's and OUTPUT's meta rows for one sequence's calls: one per chunk its rows touch."""
    total = kept + new
    starts = [max(j * chunk_size, kept) for j in range(-(-total // chunk_size))]
    return [[first + start - kept, min((j + 1) * chunk_size, total) - start, slot + j, start - j * chunk_size,
             state_index + j] for j, start in enumerate(starts)]


def _sequences(q, k, v, g, beta, lengths, states, chunk_size: int):
    """Sequences' new prepared rows, concatenated in `lengths`' order, each after its state (kept
    rows: KEPT's): (y, the states after). One WALK launch when every sequence's rows lie in one
    chunk, else three for all of them: SOLVE and OUTPUT one program per (chunk, head), STATES one
    per (sequence, head); each sequence's chunks in pool slots of their own, and its S0 and every
    chunk's end state in a state pool of its own."""
    rows = _prepared((q, k, v, g, beta), chunk_size)
    kept = [0 if state.pending is None else state.pending[0].shape[0] for state in states]
    totals = [held + new for held, new in zip(kept, lengths)]
    chunks = [-(-total // chunk_size) for total in totals]
    folds = [total // chunk_size for total in totals]
    firsts, slots, indices = ([0], [0], [0])
    for new, num_chunks, num_folds in zip(lengths, chunks, folds):
        firsts.append(firsts[-1] + new)
        slots.append(slots[-1] + num_chunks)
        indices.append(indices[-1] + num_folds + 1)
    shapes = kept_row_shapes(v.shape[1], q.shape[-1], v.shape[-1])
    pools = [torch.zeros(slots[-1], chunk_size, *shape, dtype=torch.float32, device=q.device) for shape in shapes]
    state_pool = torch.empty(indices[-1], *states[0].ssm.shape, dtype=torch.float32, device=q.device)
    per_chunk, per_sequence = [], []
    for i, state in enumerate(states):
        for pool, rows_kept in zip(pools, state.pending or ()):
            pool[slots[i], :kept[i]] = rows_kept
        state_pool[indices[i]] = state.ssm
        per_chunk += _chunk_meta(kept[i], lengths[i], firsts[i], slots[i], indices[i], chunk_size)
        per_sequence.append([firsts[i], lengths[i], slots[i], kept[i], indices[i]])
    per_chunk, per_sequence = (torch.tensor(m, dtype=torch.int64).to(q.device) for m in (per_chunk, per_sequence))
    y = torch.empty_like(rows[2])
    walk = all(num_chunks == 1 for num_chunks in chunks)  # each sequence's rows in one chunk: S in place
    passes = ((WALK, per_sequence),) if walk else ((SOLVE, per_chunk), (STATES, per_sequence), (OUTPUT, per_chunk))
    for mode, meta in passes:
        _launch(mode, rows, meta, pools, state_pool, y, chunk_size)
    after = []
    for i, state in enumerate(states):
        left = totals[i] % chunk_size
        pending = tuple(pool[slots[i + 1] - 1, :left].clone() for pool in pools) if left else None
        end = state_pool[indices[i] + (0 if walk else folds[i])].clone()
        after.append(DeltaState(end, state.folded + totals[i] - left, pending))
    return y, after


class ConsistentRows(torch.autograd.Function):
    """Forward: the row kernel over sequences from their S0 at their first rows. Backward:
    forms.chunk's torch form at the same chunk boundaries, each sequence recomputed in fp32 and
    differentiated (the same function in exact arithmetic). Outputs: y, then each sequence's S
    after (no gradient); each sequence's kept rows are appended to `kept_out`, outside autograd."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, states0, lengths, chunk_size, kept_out):
        ctx.save_for_backward(q, k, v, g, beta, states0)
        ctx.lengths, ctx.chunk_size = lengths, chunk_size
        y, after = _sequences(q, k, v, g, beta, lengths, [DeltaState(s) for s in states0], chunk_size)
        kept_out.extend(state.pending for state in after)
        ends = torch.stack([state.ssm for state in after])
        ctx.mark_non_differentiable(ends)
        return y, ends

    @staticmethod
    def backward(ctx, grad_y, _grad_ends):
        def torch_form(q, k, v, g, beta, states0):
            cuts = [0, *accumulate(ctx.lengths)]
            return torch.cat([run_chunks(chunk, tuple(t[lo:hi] for t in (q, k, v, g, beta)), state0,
                                         ctx.chunk_size)[0] for lo, hi, state0 in zip(cuts, cuts[1:], states0)])
        return grads_of_recomputed(ctx.saved_tensors, ctx.needs_input_grad, torch_form, grad_y) + (None,) * 3


def consistent_many(q, k, v, g, beta, lengths, states, *, chunk_size: int):
    """Sequences' prepared rows [sum(lengths), H, *], concatenated, each after its state: (y [rows,
    H, V] fp32, the states after), in one set of launches for all. A recorded call (the trainer's)
    differentiates each sequence from its first row."""
    lengths = [int(n) for n in lengths]
    if not records_graph(q, k, v, g, beta, *(state.ssm for state in states)):
        return _sequences(q, k, v, g, beta, lengths, states, chunk_size)
    started = [state.folded + (0 if state.pending is None else state.pending[0].shape[0]) for state in states]
    if any(started):
        raise ValueError("the consistent gated_delta backward differentiates a sequence from its first row; "
                         f"this call starts at row {max(started)}")
    kept = []
    y, ends = ConsistentRows.apply(q, k, v, g, beta, torch.stack([s.ssm for s in states]), lengths, chunk_size, kept)
    return y, [DeltaState(end, n - n % chunk_size, pending) for end, n, pending in zip(ends, lengths, kept)]


def consistent(q, k, v, g, beta, state: DeltaState, *, chunk_size: int):
    """One sequence's prepared rows [T, H, *] after `state`: (y [T, H, V] fp32, the state after)."""
    y, (after,) = consistent_many(q, k, v, g, beta, [q.shape[0]], [state], chunk_size=chunk_size)
    return y, after
