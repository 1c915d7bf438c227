"""The routed experts on CUDA as grouped GEMMs, one launch for all experts (expert_gemm.consistent).

experts: two Triton grouped GEMMs (triton.py) around relu^2, with the bits of linear.consistent's
per-expert loop and no host sync. (The fast contract's grouped GEMMs are fast_cuda.py's.) Pairs
are stably sorted by expert (forms.py), so each expert's rows are in routing order; the tile
follows the mean rows per expert, the reduction order does not. Backward: dx by the grouped
kernel on the transposed weights, dw by one summing each expert's rows in order: deterministic
(C8's tolerance).
"""
import torch

import kernels.ops.expert_gemm.triton as expert_gemm_triton
from kernels.ops.autograd_use import records_graph
from kernels.ops.expert_gemm.forms import _sorted_pairs

# (largest mean rows per expert, BLOCK_M)
_ROW_TILES = ((16, 16), (48, 32), (96, 64), (None, 128))


def _block_m(num_rows: int, num_experts: int) -> int:
    mean = num_rows / max(num_experts, 1)
    return next(block for largest, block in _ROW_TILES if largest is None or mean <= largest)


def _grouped_forward(x, w, starts, counts):
    return expert_gemm_triton.grouped(x.contiguous(), w, starts, counts, block_m=_block_m(x.shape[0], w.shape[0]))


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
            grad_x = expert_gemm_triton.grouped(grad, w.transpose(1, 2).contiguous(), starts, counts,
                                                   block_m=_block_m(grad.shape[0], w.shape[0]))
        if ctx.needs_input_grad[1]:
            grad_w = expert_gemm_triton.weight_grad(grad, x.contiguous(), starts, counts, w.shape[0])
        return grad_x, grad_w, None, None


def experts(x, ids, up, down, activation):
    """Unweighted per-slot outputs [M, k, H] of the routed experts (expert_gemm.consistent's,
    which passes its activation: the single rounding stays defined in one place)."""
    top_k = ids.shape[1]
    order, starts, counts = _sorted_pairs(ids, up.shape[0])
    h = _grouped(x[order // top_k], up, starts, counts)
    y = _grouped(activation(h), down, starts, counts)
    return y[torch.argsort(order)].view(ids.shape + (down.shape[1],))
