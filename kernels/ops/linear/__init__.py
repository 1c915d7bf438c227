"""Linear / GEMM: y[M, N] = x[M, K] @ w[N, K]^T, accumulated in fp32 by the BLAS.

Consistency: CPU BLAS (MKL) picks its micro-kernel and K blocking from the whole shape, so a row's
bits follow M, even between padded sizes. The consistent GEMM cuts the padded rows into tiles of
`row_multiple` rows, one GEMM of that shape per tile: every row is reduced by the same call
whatever the batch (checked: its slot in the tile and the other rows move no bit). On CPU both
contracts run half-precision GEMMs in fp32, rounded once (bf16 products are exact in fp32); CUDA
has one K order at every M (cuda.py, triton.py). Reference: gates/reference/linear.py.
"""
from kernels.ops.linear import consistent, fast

VARIANTS = {"fast": fast.fast, "fast_split_k": fast.fast_split_k, "consistent": consistent.consistent}
CALL_KEYWORDS = {"out_dtype"}  # fp32 partials for a layout's K leaves (kernels/layout/tensor_parallel.py)
