"""Row sums whose order does not follow the batch.

torch reduces a tensor with a single output of >= 32768 elements (GRAIN_SIZE) by splitting
it across threads and adding the partials, but reduces each row serially when there are
several outputs: so a 1-row batch (a lone decode step over a 151936-token vocabulary) sums
in another order than the same row among others, and its bits follow the thread count
(measured: 3-7% of single rows differ by 1-2 ulp). Summing in fixed chunks of CHUNK
elements, then the chunk partials in order, keeps every stage on the serial path.
On CUDA, torch's reduction kernels pick their thread layout from the whole tensor's shape
(a lone row is split over more threads than a row among many): one Triton program per row
walks it in steps fixed by the row length instead (kernels/ops/reduction_triton.py).
Prefix sums (row_prefix_sum): torch's CPU cumsum walks each row serially, a double
accumulator rounded to fp32 at every element, whatever the batch; its CUDA cumsum takes cub's
device-wide scan for a tensor of one row and a per-row block scan otherwise, so there a
Triton program walks each row in fixed chunks.
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


def row_prefix_sum(x: torch.Tensor) -> torch.Tensor:
    """Inclusive prefix sums of x [R, L] fp32 along L, in an order fixed by the row alone."""
    if x.device.type == "cuda":
        from kernels.ops import reduction_triton  # imports Triton: CUDA machines only
        return reduction_triton.row_prefix_sum(x)
    return torch.cumsum(x, dim=-1)
