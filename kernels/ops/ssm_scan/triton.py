"""The consistent Mamba-2 SSD scan on CUDA, three Triton kernels (consistent.py's backend).

The rows (buffered, then new) start at a chunk boundary with state S0: (1) per (chunk, head) the
cumsum of dt * A (tl.cumsum: row t reads rows <= t); (2) per head the completed chunks' states, in
order; (3) per (BT-row block, head) the new rows' y, s-blocks walked in order. Blocks sit at
multiples of BT in the chunk, so a row keeps its slot and walk in prefill, chunk or decode; other
rows add exact zeros. Batched decode runs (3) as decode_triton.py's one-row kernels, the same
bits. fold_all is the fast prefill (it claims no bits). Backward: the torch form (C8's tolerance).
"""
import torch
import triton
import triton.language as tl

from kernels.ops.autograd_use import grads_of_recomputed, records_graph
from kernels.ops.padding import pad_to_multiple
from kernels.ops.ssm_scan.decode_triton import decode_rows

ROW_BLOCK = 32  # BT = BS; smaller when the chunk is (Q = 16 in the cut)


# Each kernel's last grid axis is the sequence: meta [B, 5] int64 holds per sequence its first
# row in the row tensors, its rows from the chunk boundary, its first new row, the index of its
# states (boundary state and chunk starts) and the first row of its output. One segment's call
# is B = 1, index 0; a batched decode reads every sequence's rows and state in the store's
# pools, at slot * Q and slot, and its chunk start is the pool's state itself (one start).


@triton.jit
def _chunk_cumsum_kernel(dt_ptr, a_ptr, cs_ptr, meta_ptr, num_heads, padded_rows, Q: tl.constexpr):
    chunk, head, seq = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    base, num_rows = tl.load(meta_ptr + seq * 5 + 0), tl.load(meta_ptr + seq * 5 + 1)
    rows = chunk * Q + tl.arange(0, Q)
    dt = tl.load(dt_ptr + (base + rows) * num_heads + head, mask=rows < num_rows, other=0.0)
    tl.store(cs_ptr + (seq * num_heads + head) * padded_rows + rows, tl.cumsum(dt * tl.load(a_ptr + head), axis=0))


@triton.jit
def _chunk_states_kernel(x_ptr, b_ptr, dt_ptr, cs_ptr, s0_ptr, starts_ptr, meta_ptr, num_starts, num_heads,
                         num_groups, heads_per_group, padded_rows, P: tl.constexpr, N: tl.constexpr,
                         Q: tl.constexpr, BS: tl.constexpr):
    head, seq = tl.program_id(0), tl.program_id(1)
    group = head // heads_per_group
    base, num_rows = tl.load(meta_ptr + seq * 5 + 0), tl.load(meta_ptr + seq * 5 + 1)
    state_index = tl.load(meta_ptr + seq * 5 + 3)
    cs_row = (seq * num_heads + head) * padded_rows
    p, n = tl.arange(0, P), tl.arange(0, N)
    tile = p[:, None] * N + n[None, :]
    starts = starts_ptr + state_index * num_starts * num_heads * P * N
    num_complete = num_rows // Q
    if num_complete > 0:  # a decode's sequence whose chunk did not complete keeps its state, unread
        state = tl.load(s0_ptr + (state_index * num_heads + head) * P * N + tile)
        for chunk in range(0, num_complete):
            tl.store(starts + (chunk * num_heads + head) * P * N + tile, state)
            cs_end = tl.load(cs_ptr + cs_row + chunk * Q + Q - 1)
            acc = tl.zeros((P, N), dtype=tl.float32)
            for s0 in range(0, Q, BS):
                s = chunk * Q + s0 + tl.arange(0, BS)
                to_end = (tl.exp(cs_end - tl.load(cs_ptr + cs_row + s))
                          * tl.load(dt_ptr + (base + s) * num_heads + head))
                xs = tl.load(x_ptr + ((base + s)[:, None] * num_heads + head) * P + p[None, :])  # [BS, P]
                bs = tl.load(b_ptr + ((base + s)[:, None] * num_groups + group) * N + n[None, :])  # [BS, N]
                acc = tl.dot(tl.trans(xs * to_end[:, None]), bs, acc, input_precision="ieee")
            state = tl.exp(cs_end) * state + acc
        tl.store(starts + ((num_starts - 1) * num_heads + head) * P * N + tile, state)


@triton.jit
def _chunk_outputs_kernel(x_ptr, b_ptr, c_ptr, dt_ptr, cs_ptr, starts_ptr, d_ptr, y_ptr, meta_ptr, num_starts,
                          num_heads, num_groups, heads_per_group, padded_rows, P: tl.constexpr, N: tl.constexpr,
                          Q: tl.constexpr, BT: tl.constexpr):
    block, head, seq = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    group = head // heads_per_group
    base, num_rows = tl.load(meta_ptr + seq * 5 + 0), tl.load(meta_ptr + seq * 5 + 1)
    first_row, out_base = tl.load(meta_ptr + seq * 5 + 2), tl.load(meta_ptr + seq * 5 + 4)
    cs_row = (seq * num_heads + head) * padded_rows
    t0 = (first_row // BT + block) * BT  # aligned: BT divides Q, so a block never straddles chunks
    chunk = t0 // Q
    t, p, n = t0 + tl.arange(0, BT), tl.arange(0, P), tl.arange(0, N)
    t_live = t < num_rows
    ct = tl.load(c_ptr + ((base + t)[:, None] * num_groups + group) * N + n[None, :], mask=t_live[:, None], other=0.0)
    cs_t = tl.load(cs_ptr + cs_row + t)
    acc = tl.zeros((BT, P), dtype=tl.float32)
    for s0 in range(chunk * Q, t0 + BT, BT):
        s = s0 + tl.arange(0, BT)
        s_live = s < num_rows
        bs = tl.load(b_ptr + ((base + s)[:, None] * num_groups + group) * N + n[None, :],
                     mask=s_live[:, None], other=0.0)
        xs = tl.load(x_ptr + ((base + s)[:, None] * num_heads + head) * P + p[None, :], mask=s_live[:, None], other=0.0)
        dt_s = tl.load(dt_ptr + (base + s) * num_heads + head, mask=s_live, other=0.0)
        decay = tl.exp(cs_t[:, None] - tl.load(cs_ptr + cs_row + s)[None, :])
        scores = tl.dot(ct, tl.trans(bs), input_precision="ieee")
        weights = tl.where(s[None, :] <= t[:, None], scores * decay * dt_s[None, :], 0.0)
        acc = tl.dot(weights, xs, acc, input_precision="ieee")
    start_index = tl.load(meta_ptr + seq * 5 + 3)
    starts = starts_ptr + (start_index * num_starts + chunk) * num_heads * P * N
    start = tl.load(starts + head * P * N + p[None, :] * N + n[:, None])  # [N, P]
    from_start = tl.dot(ct, start, input_precision="ieee") * tl.exp(cs_t)[:, None]
    xt = tl.load(x_ptr + ((base + t)[:, None] * num_heads + head) * P + p[None, :], mask=t_live[:, None], other=0.0)
    y = acc + from_start + tl.load(d_ptr + head) * xt
    stored = t_live & (t >= first_row)
    tl.store(y_ptr + ((out_base + t - first_row)[:, None] * num_heads + head) * P + p[None, :], y, mask=stored[:, None])


def _require(rows, chunk_size: int) -> int:
    x, B = rows[0], rows[1]
    sizes = {"chunk_size": chunk_size, "head_dim": x.shape[2], "state_size": B.shape[2]}
    for name, size in sizes.items():
        if size < 16 or size & (size - 1):
            raise ValueError(f"ssm_scan on CUDA: {name} {size} must be a power of two >= 16")
    return min(ROW_BLOCK, chunk_size)


def forward(rows, state0, A, D, *, chunk_size: int, first_row: int):
    """(y of rows[first_row:] [T, H, P] fp32, the state after the last chunk the rows complete
    [H, P, N]). rows = (x [L, H, P], B [L, G, N], C [L, G, N], dt [L, H]) fp32, row 0 at a
    chunk boundary, state0 the state there; A [H] fp32, D [H]."""
    if any(r.dtype != torch.float32 for r in rows):
        raise ValueError("ssm_scan on CUDA: the rows come in fp32")
    rows = [r.contiguous() for r in rows]
    num_rows, block = rows[0].shape[0], _require(rows, chunk_size)
    meta = torch.tensor([[0, num_rows, first_row, 0, 0]], dtype=torch.int64).to(rows[0].device, non_blocking=True)
    num_starts = num_rows // chunk_size + 1
    state0 = state0.contiguous()
    cs = _cumsums(rows, A, meta, chunk_size=chunk_size, num_rows=num_rows, num_sequences=1)
    if num_starts == 1:  # a call inside one chunk starts from the sequence's boundary state as it is
        starts = state0[None]
    else:
        starts = torch.empty((num_starts,) + state0.shape, dtype=torch.float32, device=state0.device)
        _states(rows, cs, state0, starts, meta, chunk_size=chunk_size, num_sequences=1)
    y = torch.empty((num_rows - first_row,) + rows[0].shape[1:], dtype=torch.float32, device=state0.device)
    _outputs(rows, cs, starts, D, y, meta, chunk_size=chunk_size, num_sequences=1,
             num_blocks=triton.cdiv(num_rows, block) - first_row // block)
    return y, starts[num_starts - 1]


def fold_all(rows, state0, A, D, *, chunk_size: int, first_row: int):
    """The fast contract's prefill on CUDA (chunks from the call's row 0, every row folded):
    (y of rows[first_row:], the state after all rows). Padding the rows to whole chunks with
    zeros folds the last partial chunk: a padding row's dt is 0, so it moves neither the
    cumsum nor the state."""
    num_rows = rows[0].shape[0]
    y, end = forward([pad_to_multiple(r, 0, chunk_size) for r in rows], state0, A, D, chunk_size=chunk_size,
                     first_row=first_row)
    return y[:num_rows - first_row], end


def decode_batch(pools, state_pool, slots, buffered, A, D, *, chunk_size: int):
    """One new row of every sequence [b], already written at row `buffered` of its slot in the
    row pools (x [S, Q, H, P], B, C [S, Q, G, N], dt [S, Q, H], fp32): its output [b, H, P],
    the kernels re-playing each slot's chunk as forward() does one segment's. The outputs read
    each slot of state_pool [S, H, P, N] as their chunk's start; then a sequence whose chunk
    completes folds it there, in place (the others' states are not touched)."""
    num_sequences = slots.shape[0]
    meta = torch.stack((slots * chunk_size, buffered + 1, buffered, slots,
                        torch.arange(num_sequences, device=slots.device)), dim=1)
    rows = [pool.view(-1, *pool.shape[2:]) for pool in pools]
    cs = _cumsums(rows, A, meta, chunk_size=chunk_size, num_rows=chunk_size, num_sequences=num_sequences)
    y = torch.empty((num_sequences,) + pools[0].shape[2:], dtype=torch.float32, device=state_pool.device)
    decode_rows(rows, cs, state_pool, D, y, meta, block=_require(rows, chunk_size))
    _states(rows, cs, state_pool, state_pool[:, None], meta, chunk_size=chunk_size, num_sequences=num_sequences)
    return y


def _cumsums(rows, A, meta, *, chunk_size, num_rows, num_sequences):
    """[B, H, chunks * Q]: every sequence's chunk cumsums of dt * A."""
    dt, num_heads = rows[3], rows[0].shape[1]
    num_chunks = triton.cdiv(num_rows, chunk_size)
    cs = torch.empty((num_sequences, num_heads, num_chunks * chunk_size), dtype=torch.float32, device=dt.device)
    _chunk_cumsum_kernel[(num_chunks, num_heads, num_sequences)](dt, A, cs, meta, num_heads, cs.shape[-1],
                                                                Q=chunk_size)
    return cs


def _states(rows, cs, states, starts, meta, *, chunk_size, num_sequences):
    """Every sequence's completed chunks folded from its state in `states` [S, H, P, N] (or
    [H, P, N]): chunk starts and the end state into `starts` [S, n, H, P, N] at the same index."""
    x, B, _, dt = rows
    num_heads, num_groups = x.shape[1], B.shape[1]
    _chunk_states_kernel[(num_heads, num_sequences)](
        x, B, dt, cs, states, starts, meta, starts.shape[-4], num_heads, num_groups, num_heads // num_groups,
        cs.shape[-1], P=x.shape[2], N=B.shape[2], Q=chunk_size, BS=_require(rows, chunk_size), num_warps=8)


def _outputs(rows, cs, starts, D, y, meta, *, chunk_size, num_sequences, num_blocks):
    """Every sequence's new rows' outputs into y, each chunk from its start in `starts`."""
    x, B, C, dt = rows
    num_heads, num_groups = x.shape[1], B.shape[1]
    _chunk_outputs_kernel[(num_blocks, num_heads, num_sequences)](
        x, B, C, dt, cs, starts, D, y, meta, starts.shape[-4], num_heads, num_groups, num_heads // num_groups,
        cs.shape[-1], P=x.shape[2], N=B.shape[2], Q=chunk_size, BT=_require(rows, chunk_size), num_warps=8)


class ConsistentScan(torch.autograd.Function):
    """Forward: the Triton kernels. Backward: the torch form recomputed in fp32 and differentiated."""

    @staticmethod
    def forward(ctx, x, B, C, dt, state0, A, D, chunk_size, first_row):
        ctx.save_for_backward(x, B, C, dt, state0, A, D)
        ctx.chunk_size, ctx.first_row = chunk_size, first_row
        y, boundary = forward((x, B, C, dt), state0, A, D, chunk_size=chunk_size, first_row=first_row)
        ctx.mark_non_differentiable(boundary)
        return y, boundary

    @staticmethod
    def backward(ctx, grad_y, _grad_boundary):
        from kernels.ops.ssm_scan.forms import run_chunks  # the torch form

        def torch_form(x, B, C, dt, state0, A, D):
            return run_chunks([x, B, C, dt], state0, A, D, ctx.chunk_size)[0][ctx.first_row:]
        return grads_of_recomputed(ctx.saved_tensors, ctx.needs_input_grad, torch_form, grad_y) + (None, None)


def consistent(rows, state0, A, D, *, chunk_size: int, first_row: int):
    """ssm_scan.consistent's scan on CUDA: (y of the new rows, the new boundary state)."""
    if records_graph(*rows, state0, A, D):
        return ConsistentScan.apply(*rows, state0, A, D, chunk_size, first_row)
    return forward(rows, state0, A, D, chunk_size=chunk_size, first_row=first_row)
