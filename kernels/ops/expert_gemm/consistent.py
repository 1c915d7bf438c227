"""expert_gemm.consistent: each expert's rows in routing order through the row-tiled GEMM, the
activation (relu^2, or the clamped SwiGLU) rounded once, unweighted per-slot outputs
(moe_combine.consistent applies the weights); on CUDA two grouped Triton GEMMs, the same bits (cuda.py).
"""
import functools

from kernels.ops.expert_gemm.forms import _routing_groups, swiglu_limited_once
from kernels.ops.linear.consistent import consistent as linear_consistent
from kernels.ops.relu2_mlp.consistent import _relu2_once


def experts_consistent(x, ids, weights, up, down, *, row_multiple: int, swiglu_limit=None):
    """Unweighted per-slot outputs [M, k, H] in the activation dtype; each expert's rows in
    routing order through the row-tiled GEMM, so a row's bits ignore its group's size.
    `weights` is not used here: combine_consistent applies it (pair the two). `swiglu_limit`:
    up holds [gate | up] rows and the activation is the clamped SwiGLU (DeepSeek-V4), else relu^2.
    On CUDA: two grouped GEMMs for all experts, the same bits (kernels/ops/expert_gemm/cuda.py)."""
    activation = _relu2_once if swiglu_limit is None else functools.partial(swiglu_limited_once,
                                                                              limit=swiglu_limit)
    if x.device.type == "cuda":
        import kernels.ops.expert_gemm.cuda as expert_gemm_cuda  # imports Triton: CUDA machines only
        return expert_gemm_cuda.experts(x, ids, up, down, activation)
    return experts_loop(x, ids, up, down, functools.partial(linear_consistent, row_multiple=row_multiple),
                        activation)


def experts_loop(x, ids, up, down, gemm, activation=_relu2_once):
    """experts_consistent one expert at a time, with `gemm(x, w)` as the GEMM: the CPU path,
    and the reference the grouped CUDA kernels are checked against bit for bit."""
    out = x.new_empty(ids.shape + (down.shape[1],))
    for expert, (rows, slots) in _routing_groups(ids, up.shape[0]).items():
        h = activation(gemm(x[rows], up[expert]))
        out[rows, slots] = gemm(h, down[expert])
    return out
