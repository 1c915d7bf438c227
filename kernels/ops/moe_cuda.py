"""The routed experts on CUDA as grouped GEMMs, one launch for all experts, in both contracts.

experts (moe.experts_consistent): two Triton grouped GEMMs (grouped_linear_triton.py) around
relu^2, with the bits of linear.consistent's per-expert loop and no host sync. experts_fast:
torch._grouped_mm (cuBLAS/CUTLASS, as torchtitan's MoE), the weight applied before down_proj.
Pairs are stably sorted by expert, so each expert's rows are in routing order; the tile follows the
mean rows per expert, the reduction order does not. Backward: dx by the grouped kernel on the
transposed weights, dw by one summing each expert's rows in order: deterministic (C8's tolerance).
"""
import torch

from kernels.ops import grouped_linear_triton
from kernels.ops.autograd_use import records_graph

# (largest mean rows per expert, BLOCK_M)
_ROW_TILES = ((16, 16), (48, 32), (96, 64), (None, 128))


def _block_m(num_rows: int, num_experts: int) -> int:
    mean = num_rows / max(num_experts, 1)
    return next(block for largest, block in _ROW_TILES if largest is None or mean <= largest)


def _sorted_pairs(ids, num_experts: int):
    """(order of the flat (token, slot) pairs by expert, routing order inside; group starts and
    counts as int32 on the device), without a host sync."""
    by_expert, order = torch.sort(ids.flatten(), stable=True)
    # group bounds by search in the sorted ids: no atomics, no host sync (bincount would sync)
    bounds = torch.searchsorted(by_expert, torch.arange(num_experts + 1, device=ids.device)).to(torch.int32)
    return order, bounds[:-1].contiguous(), (bounds[1:] - bounds[:-1]).contiguous()


def _grouped_forward(x, w, starts, counts):
    return grouped_linear_triton.grouped(x.contiguous(), w, starts, counts, block_m=_block_m(x.shape[0], w.shape[0]))


def _grouped(x, w, starts, counts):
    """GroupedLinear where autograd records, its forward kernel alone where it does not."""
    return GroupedLinear.apply(x, w, starts, counts) if records_graph(x, w) else _grouped_forward(x, w, starts, counts)


class GroupedLinear(torch.autograd.Function):
    """y[p] = x[p] @ w[e(p)]^T for rows grouped by expert (starts, counts on the device)."""

    @staticmethod
    def forward(ctx, x, w, starts, counts):
        ctx.save_for_backward(x, w, starts, counts)
        return _grouped_forward(x, w, starts, counts)

    @staticmethod
    def backward(ctx, grad):
        x, w, starts, counts = ctx.saved_tensors
        grad = grad.to(x.dtype).contiguous()
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:  # dx[p] = dy[p] @ w[e]: the same kernel on w[e]^T
            grad_x = grouped_linear_triton.grouped(grad, w.transpose(1, 2).contiguous(), starts, counts,
                                                   block_m=_block_m(grad.shape[0], w.shape[0]))
        if ctx.needs_input_grad[1]:
            grad_w = grouped_linear_triton.weight_grad(grad, x.contiguous(), starts, counts, w.shape[0])
        return grad_x, grad_w, None, None


def experts(x, ids, up, down, relu2_once):
    """Unweighted per-slot outputs [M, k, H] of the routed experts (moe.experts_consistent,
    which passes its relu2_once: the activation's single rounding stays defined in one place)."""
    top_k = ids.shape[1]
    order, starts, counts = _sorted_pairs(ids, up.shape[0])
    h = _grouped(x[order // top_k], up, starts, counts)
    y = _grouped(relu2_once(h), down, starts, counts)
    return y[torch.argsort(order)].view(ids.shape + (down.shape[1],))


def grouped_mm_available(x) -> bool:
    """torch._grouped_mm runs bf16 on Hopper-class GPUs (torch >= 2.8)."""
    return (hasattr(torch, "_grouped_mm") and x.dtype == torch.bfloat16
            and torch.cuda.get_device_capability(x.device) >= (9, 0))


def experts_fast(x, ids, weights, up, down):
    """Weighted per-slot outputs [M, k, H] (moe.experts_fast's arithmetic) by grouped GEMMs."""
    top_k = ids.shape[1]
    order, starts, counts = _sorted_pairs(ids, up.shape[0])
    ends = starts + counts
    h = torch.relu(torch._grouped_mm(x[order // top_k], up.transpose(1, 2), offs=ends))
    h = ((h * h).float() * weights.flatten()[order, None]).to(x.dtype)
    y = torch._grouped_mm(h, down.transpose(1, 2), offs=ends)
    return y[torch.argsort(order)].view(ids.shape + (down.shape[1],))
