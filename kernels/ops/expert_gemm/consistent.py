"""expert_gemm.consistent: each expert's rows in routing order through the row-tiled GEMM, relu^2
rounded once, unweighted per-slot outputs (moe_combine.consistent applies the weights); on CUDA
two grouped Triton GEMMs with the same bits (cuda.py).
"""
import functools

from kernels.ops.expert_gemm.forms import _routing_groups
from kernels.ops.linear.consistent import consistent as linear_consistent
from kernels.ops.relu2_mlp.consistent import _relu2_once


def experts_consistent(x, ids, weights, up, down, *, row_multiple: int):
    """Unweighted per-slot outputs [M, k, H] in the activation dtype; each expert's rows in
    routing order through the row-tiled GEMM, so a row's bits ignore its group's size.
    `weights` is not used here: combine_consistent applies it (pair the two). On CUDA: two
    grouped GEMMs for all experts, the same bits (kernels/ops/expert_gemm/cuda.py)."""
    if x.device.type == "cuda":
        import kernels.ops.expert_gemm.cuda as expert_gemm_cuda  # imports Triton: CUDA machines only
        return expert_gemm_cuda.experts(x, ids, up, down, _relu2_once)
    return experts_loop(x, ids, up, down, functools.partial(linear_consistent, row_multiple=row_multiple))


def experts_loop(x, ids, up, down, gemm):
    """experts_consistent one expert at a time, with `gemm(x, w)` as the GEMM: the CPU path,
    and the reference the grouped CUDA kernels are checked against bit for bit."""
    out = x.new_empty(ids.shape + (down.shape[1],))
    for expert, (rows, slots) in _routing_groups(ids, up.shape[0]).items():
        h = _relu2_once(gemm(x[rows], up[expert]))
        out[rows, slots] = gemm(h, down[expert])
    return out
