"""relu2_mlp.consistent: row-tiled GEMMs and relu^2 rounded once (also the routed experts'
activation: kernels/ops/expert_gemm/consistent.py)."""
import torch

from kernels.ops.linear.consistent import consistent as linear_consistent


def _relu2_once(h):
    """relu(h)^2 in fp32, rounded once (a bf16 value's square is exact in fp32)."""
    h32 = torch.relu(h.float())
    return (h32 * h32).to(h.dtype)


def shared_consistent(x, up, down, *, row_multiple: int):
    """The shared expert with row-tiled GEMMs and relu^2 rounded once."""
    h = _relu2_once(linear_consistent(x, up, row_multiple=row_multiple))
    return linear_consistent(h, down, row_multiple=row_multiple)
