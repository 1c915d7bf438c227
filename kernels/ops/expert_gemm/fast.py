"""expert_gemm.fast: plain GEMMs per expert group (the kernel follows the group size), the routing
weight multiplied in before down_proj and rounded there; on a Hopper GPU in bf16 grouped GEMMs
for all experts (fast_cuda.py); DeepSeek-V4's clamped SwiGLU in the activation dtype."""
import functools

import torch

from kernels.ops.expert_gemm.forms import _routing_groups, swiglu_limited_fast
from kernels.ops.linear.fast import fast as linear_fast


def experts_fast(x, ids, weights, up, down, *, swiglu_limit=None):
    """Plain GEMMs per expert group (the kernel follows the group size); the routing weight
    is multiplied into the activation BEFORE down_proj and rounded there, as some engines
    do. Returns the *weighted* per-slot outputs [M, k, H] (pair it with combine_fast). On a
    Hopper GPU in bf16: grouped GEMMs for all experts (kernels/ops/expert_gemm/fast_cuda.py).
    `swiglu_limit`: up holds [gate | up] rows, the activation is the clamped SwiGLU."""
    if x.device.type == "cuda":
        import kernels.ops.expert_gemm.fast_cuda as fast_cuda
        if fast_cuda.grouped_mm_available(x):
            return fast_cuda.experts_fast(x, ids, weights, up, down, activation=_activation(swiglu_limit))
    return experts_fast_loop(x, ids, weights, up, down, activation=_activation(swiglu_limit))


def _relu2(h):
    h = torch.relu(h)
    return h * h


def _activation(swiglu_limit):
    return _relu2 if swiglu_limit is None else functools.partial(swiglu_limited_fast, limit=swiglu_limit)


def experts_fast_loop(x, ids, weights, up, down, *, activation=_relu2):
    """experts_fast one expert at a time (the CPU path; the device benchmark's reference)."""
    out = x.new_empty(ids.shape + (down.shape[1],))
    for expert, (rows, slots) in _routing_groups(ids, up.shape[0]).items():
        h = activation(linear_fast(x[rows], up[expert]))
        h = (h.float() * weights[rows, slots, None]).to(x.dtype)
        out[rows, slots] = linear_fast(h, down[expert])
    return out
