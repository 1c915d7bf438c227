"""Expert parallelism for the MoE regions: rank e of ep owns experts [e * E/ep, (e+1) * E/ep).

routing_order: each rank sends its block of tokens' (token, slot) pairs, in routing order, to the
expert's owner in one all_to_all_single (row, local id and weight packed as bytes), which runs the
region's own expert implementation; outputs return to their (token, slot) place and are gathered,
so moe_combine runs unchanged, in slot order. A row's expert output does not depend on the rows
sharing its group (C2), so no bit depends on ep. rank_order: each rank combines its experts' slots
into a partial rounded to the activation dtype and all_reduce sums them: the bits follow ep.
"""
import math

import torch


def _token_block(num_tokens: int, rank: int, size: int) -> tuple:
    """[lo, hi) of the tokens rank dispatches (block sizes differ by at most one)."""
    base, extra = divmod(num_tokens, size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (rank < extra)


def _gather_blocks(block, num_tokens: int, axis):
    """The ranks' token blocks, all-gathered into [M, ...]."""
    sizes = [hi - lo for lo, hi in (_token_block(num_tokens, r, axis.size) for r in range(axis.size))]
    return torch.cat(axis.gather_rows(block, sizes))


def _pack(*columns):
    """Per-row tensors ([P, ...] each, any dtypes) side by side as bytes [P, total bytes]: one
    collective carries them all, bit for bit."""
    return torch.cat([c.reshape(c.shape[0], math.prod(c.shape[1:])).contiguous().view(torch.uint8)
                      for c in columns], dim=1)  # explicit widths: a rank may send no pairs


def _unpack(packed, *specs):
    """_pack's inverse: specs = (dtype, elements per row) for each column -> [P, n] ([P] for n = 1)."""
    out, offset = [], 0
    for dtype, width in specs:
        size = width * dtype.itemsize
        # a fresh copy: a view at this byte offset cannot be reinterpreted (nor one of no rows)
        column = packed.new_empty((packed.shape[0], size)).copy_(packed[:, offset:offset + size]).view(dtype)
        out.append(column[:, 0] if width == 1 else column)
        offset += size
    return out


def routed_experts(op, x, ids, weights, up, down, *, axis, **keywords):
    """Slot outputs [M, k, H] of `op` (an expert_gemm implementation, called with the model's
    `keywords`), experts split over the axis, tokens dispatched and returned by all-to-all."""
    per_rank, top_k = up.shape[0] // axis.size, ids.shape[1]
    lo, hi = _token_block(ids.shape[0], axis.rank, axis.size)
    tokens = torch.arange(lo, hi, device=ids.device).repeat_interleave(top_k)  # routing order: token, then slot
    slots = torch.arange(top_k, device=ids.device).repeat(hi - lo)
    order = torch.sort(ids[tokens, slots] // per_rank, stable=True).indices  # by destination
    tokens, slots = tokens[order], slots[order]
    experts = ids[tokens, slots]
    send = torch.bincount(experts // per_rank, minlength=axis.size).tolist()
    recv = axis.exchange_counts(send)
    # one all-to-all for each pair's row, local expert id and weight (packed as bytes)
    rows, local_ids, local_weights = _unpack(
        axis.all_to_all(_pack(x[tokens], experts % per_rank, weights[tokens, slots]), send, recv),
        (x.dtype, x.shape[1]), (experts.dtype, 1), (weights.dtype, 1))  # [P', H], [P'], [P']
    first = axis.rank * per_rank
    mine = slice(first, first + per_rank)
    out = op(rows, local_ids[:, None], local_weights[:, None], up[mine], down[mine], **keywords)[:, 0]
    block = x.new_empty(hi - lo, top_k, down.shape[1])
    block[tokens - lo, slots] = axis.all_to_all(out, recv, send)
    return _gather_blocks(block, ids.shape[0], axis)


def local_experts(op, x, ids, weights, up, down, *, axis, **keywords):
    """rank_order: this rank's experts on every pair that chose them; zeros elsewhere."""
    per_rank = up.shape[0] // axis.size
    first = axis.rank * per_rank
    rows, slots = (ids // per_rank == axis.rank).nonzero(as_tuple=True)
    out = x.new_zeros(ids.shape + (down.shape[1],))
    if rows.numel():
        mine = slice(first, first + per_rank)
        out[rows, slots] = op(x[rows], ids[rows, slots][:, None] - first, weights[rows, slots][:, None],
                              up[mine], down[mine], **keywords)[:, 0]
    return out


def rank_order_combine(op, slot_outputs, ids, weights, shared_out, *, axis):
    """rank_order: the rank's slots combined by `op` (a moe_combine implementation) into a
    partial in the activation dtype, partials summed by all_reduce, then + the shared expert."""
    partial = op(slot_outputs, ids, weights, torch.zeros_like(shared_out))
    return axis.all_reduce(partial) + shared_out
