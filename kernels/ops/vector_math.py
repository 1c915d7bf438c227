"""Settle the CPU vector-math dispatch before any op runs in parallel. ATen sends contiguous
float unary ops (exp, cos, log, sqrt, ...) to oneMKL's VML, each intra-op thread on its chunk;
oneMKL picks a function's kernel on its first call, and a first call on two threads at once can
compute one chunk with a low-accuracy kernel (pytorch/pytorch#188792): a process's first table
would differ from another's. One call per op and dtype on a few elements (below ATen's grain,
so on one thread) settles it.
"""
import torch

# the unary ops ATen routes to VML (aten/src/ATen/cpu/vml.h) and the dtypes VML computes in
VML_OPS = ("abs", "acos", "asin", "atan", "cos", "erf", "erfc", "exp", "expm1", "log", "log10", "log1p",
           "log2", "sin", "sqrt", "tan", "tanh", "trunc")
VML_DTYPES = (torch.float32, torch.float64)
ELEMENTS = 8  # far below ATen's grain (2048): the calling thread computes it alone


def settle_vector_math() -> None:
    """Call every VML-backed op once per dtype on one thread; a no-op without MKL."""
    if not torch.backends.mkl.is_available():
        return
    for dtype in VML_DTYPES:
        x = torch.linspace(0.125, 0.875, ELEMENTS, dtype=dtype)
        for op in VML_OPS:
            getattr(torch, op)(x)
