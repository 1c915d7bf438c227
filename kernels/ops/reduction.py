"""Row sums whose order does not follow the batch, row prefix sums, and ordered sums over a short dim.

torch's CPU reduction splits a single output of >= 32768 elements (GRAIN_SIZE) over threads but
reduces rows serially when there are several, so a lone row (a decode over a 151936-token vocab)
sums in another, thread-dependent order; fixed CHUNK-element chunks, then the partials in order,
keep every stage serial. On CUDA torch picks its layout from the whole shape (cumsum too), so one
Triton program per row walks it in steps fixed by its length (reduction_triton.py); torch's CPU
cumsum is already serial per row. A short dim (k slots or streams) is summed by k - 1 elementwise
adds, left to right (ordered_sum), which no kernel can reorder.
"""
import torch

from kernels.ops.autograd_use import records_graph
from kernels.ops.padding import pad_to_multiple

CHUNK = 4096


class _CudaRowSum(torch.autograd.Function):
    """The Triton row sum; its gradient is the incoming gradient broadcast over the row."""

    @staticmethod
    def forward(ctx, x):
        from kernels.ops import reduction_triton  # imports Triton: CUDA machines only
        ctx.shape = x.shape
        return reduction_triton.row_sum(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.expand(ctx.shape)


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim, keepdim, in an order fixed by the row length alone."""
    if x.device.type == "cuda":
        if records_graph(x):
            return _CudaRowSum.apply(x)
        from kernels.ops import reduction_triton  # imports Triton: CUDA machines only
        return reduction_triton.row_sum(x)
    length = x.shape[-1]
    if length <= CHUNK:
        return x.sum(dim=-1, keepdim=True)
    x = pad_to_multiple(x, -1, CHUNK)
    partials = x.reshape(x.shape[:-1] + (x.shape[-1] // CHUNK, CHUNK)).sum(dim=-1)
    return partials.sum(dim=-1, keepdim=True)


def ordered_sum(columns: torch.Tensor) -> torch.Tensor:
    """Sum over a short last dim (MoE slots, residual streams, window slots), left to right: k - 1
    elementwise adds, an order fixed by k alone, whatever the other dims and the device."""
    total = columns[..., 0]
    for index in range(1, columns.shape[-1]):
        total = total + columns[..., index]
    return total


def row_prefix_sum(x: torch.Tensor) -> torch.Tensor:
    """Inclusive prefix sums of x [R, L] fp32 along L, in an order fixed by the row alone."""
    if x.device.type == "cuda":
        from kernels.ops import reduction_triton  # imports Triton: CUDA machines only
        return reduction_triton.row_prefix_sum(x)
    return torch.cumsum(x, dim=-1)
