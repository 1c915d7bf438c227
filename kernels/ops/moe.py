"""Nemotron-H mixture of experts, five families: router, topk, expert_gemm, moe_combine, relu2_mlp.

scores = sigmoid(x.float() @ w_router.float()^T); ids = top_k by (score + bias desc, id asc); w =
scaling * s_ids / (sum_slots s_ids + 1e-20) (the bias only chooses); out = sum_slots w * y_id(x) +
shared(x), y_e = down_e(relu(up_e(x))^2), shared = relu2_mlp. Consistency: row-tiled GEMMs
(linear.consistent), so a row's bits ignore how many tokens chose its expert; sigmoid by exp and
division; a stable sort (ties to the lowest id); fp32 slot-order sums, one rounding. The weight
is applied in experts_fast, or in combine_consistent: pair by kind. Reference: gates/reference/moe.py.
"""
import functools

import torch

from kernels.ops import linear
from kernels.ops.activation import position_independent_sigmoid


def _fixed_order_sum(columns):
    """Sum over the last dim, left to right (slot 0 first): k adds, an order fixed by k."""
    total = columns[..., 0]
    for slot in range(1, columns.shape[-1]):
        total = total + columns[..., slot]
    return total


def _relu2_once(h):
    """relu(h)^2 in fp32, rounded once (a bf16 value's square is exact in fp32)."""
    h32 = torch.relu(h.float())
    return (h32 * h32).to(h.dtype)


def _routing_groups(ids, num_experts):
    """Per expert: (token rows, slots) of the pairs that chose it, in routing order (token,
    then slot). A stable sort of the flat ids keeps that order inside each expert's group."""
    top_k = ids.shape[1]
    order = torch.sort(ids.flatten(), stable=True).indices
    counts = torch.bincount(ids.flatten(), minlength=num_experts).tolist()
    groups = {}
    for expert, pairs in enumerate(torch.split(order, counts)):
        if pairs.numel():
            groups[expert] = (pairs // top_k, pairs % top_k)
    return groups


def router_fast(x, w):
    """GEMM in the activation dtype (the kernel follows M), torch.sigmoid in fp32 (its vector
    body and scalar tail round differently: a score's bits follow its place in the batch)."""
    return linear.fast(x, w.to(x.dtype)).float().sigmoid()


def router_consistent(x, w, *, row_multiple: int):
    """fp32 GEMM in row tiles, position-independent sigmoid: [M, E] fp32 scores."""
    logits = linear.consistent(x.float(), w.float(), row_multiple=row_multiple)
    return position_independent_sigmoid(logits)


def _normalised(scores, ids, scaling, total):
    chosen = scores.gather(1, ids)
    return chosen / (total(chosen) + 1e-20) * scaling


def topk_fast(scores, bias, *, top_k, scaling):
    """torch.topk of the biased scores (tie order unspecified; on CPU it is not the lowest
    id), weights normalised with torch's row sum."""
    ids = torch.topk(scores + bias.float(), top_k, dim=-1).indices
    weights = _normalised(scores, ids, scaling, lambda c: c.sum(dim=-1, keepdim=True))
    return ids, weights


def topk_consistent(scores, bias, *, top_k, scaling):
    """Experts by the unique key (score + bias desc, id asc): a stable descending sort keeps
    equal keys in id order. Slots follow the key. Weights: unbiased scores over their
    slot-ordered sum, then times `scaling` once. Returns (ids [M, k] int64, weights [M, k] fp32)."""
    key = scores + bias.float()  # [M, E]; +0.0 and -0.0 compare equal, so they tie too
    ids = torch.sort(key, dim=-1, descending=True, stable=True).indices[:, :top_k]
    weights = _normalised(scores, ids, scaling, lambda c: _fixed_order_sum(c).unsqueeze(-1))
    return ids, weights


def shared_fast(x, up, down):
    """The shared expert with plain GEMMs; relu^2 in the activation dtype."""
    h = torch.relu(linear.fast(x, up))
    return linear.fast(h * h, down)


def shared_consistent(x, up, down, *, row_multiple: int):
    """The shared expert with row-tiled GEMMs and relu^2 rounded once."""
    h = _relu2_once(linear.consistent(x, up, row_multiple=row_multiple))
    return linear.consistent(h, down, row_multiple=row_multiple)


def experts_fast(x, ids, weights, up, down):
    """Plain GEMMs per expert group (the kernel follows the group size); the routing weight
    is multiplied into the activation BEFORE down_proj and rounded there, as some engines
    do. Returns the *weighted* per-slot outputs [M, k, H] (pair it with combine_fast). On a
    Hopper GPU in bf16: grouped GEMMs for all experts (kernels/ops/moe_cuda.py)."""
    if x.device.type == "cuda":
        from kernels.ops import moe_cuda  # imports Triton: CUDA machines only
        if moe_cuda.grouped_mm_available(x):
            return moe_cuda.experts_fast(x, ids, weights, up, down)
    return experts_fast_loop(x, ids, weights, up, down)


def experts_fast_loop(x, ids, weights, up, down):
    """experts_fast one expert at a time (the CPU path; the device benchmark's reference)."""
    out = x.new_empty(ids.shape + (down.shape[1],))
    for expert, (rows, slots) in _routing_groups(ids, up.shape[0]).items():
        h = torch.relu(linear.fast(x[rows], up[expert]))
        h = ((h * h).float() * weights[rows, slots, None]).to(x.dtype)
        out[rows, slots] = linear.fast(h, down[expert])
    return out


def experts_consistent(x, ids, weights, up, down, *, row_multiple: int):
    """Unweighted per-slot outputs [M, k, H] in the activation dtype; each expert's rows in
    routing order through the row-tiled GEMM, so a row's bits ignore its group's size.
    `weights` is not used here: combine_consistent applies it (pair the two). On CUDA: two
    grouped GEMMs for all experts, the same bits (kernels/ops/moe_cuda.py)."""
    if x.device.type == "cuda":
        from kernels.ops import moe_cuda  # imports Triton: CUDA machines only
        return moe_cuda.experts(x, ids, up, down, _relu2_once)
    return experts_loop(x, ids, up, down, functools.partial(linear.consistent, row_multiple=row_multiple))


def experts_loop(x, ids, up, down, gemm):
    """experts_consistent one expert at a time, with `gemm(x, w)` as the GEMM: the CPU path,
    and the reference the grouped CUDA kernels are checked against bit for bit."""
    out = x.new_empty(ids.shape + (down.shape[1],))
    for expert, (rows, slots) in _routing_groups(ids, up.shape[0]).items():
        h = _relu2_once(gemm(x[rows], up[expert]))
        out[rows, slots] = gemm(h, down[expert])
    return out


def combine_fast(weighted_slot_outputs, ids, weights, shared_out):
    """The top-k slots' weighted outputs summed in fp32 (as vLLM's moe_sum reduces over
    top-k), rounded to the activation dtype, then + shared in the activation dtype (two
    roundings, as HF). Expects outputs already weighted by experts_fast (weights rounded into
    the activation before down_proj), so `weights` and `ids` are not used."""
    acc = weighted_slot_outputs.float().sum(dim=1)
    return acc.to(shared_out.dtype) + shared_out


def combine_consistent(slot_outputs, ids, weights, shared_out):
    """fp32: w_0*y_0 + w_1*y_1 + ... + w_{k-1}*y_{k-1} in slot order, each weight applied
    once to its slot's (unweighted, experts_consistent) output, then + shared; one rounding
    to the slot outputs' dtype. `ids` is not used: slot order, not expert order."""
    weighted = slot_outputs.float() * weights.float().unsqueeze(-1)  # [M, k, H]
    acc = _fixed_order_sum(weighted.transpose(1, 2)) + shared_out.float()  # [M, H]
    return acc.to(slot_outputs.dtype)
