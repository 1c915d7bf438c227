"""RMSNorm over the last dim: y = x * rsqrt(mean(x^2) + eps) * w, optionally after a residual add.

With a residual, h = x + residual is normed and returned as the new residual. Consistency: a row's
sum of squares is reduced in an order fixed by its length (kernels/ops/reduction.py; torch alone
splits a lone row of >= 32768 elements over threads); the residual sum is rounded to the activation
dtype before the norm reads it, the output once from fp32. Reference: gates/reference/norm.py.
"""
from kernels.ops.norm import consistent, fast

VARIANTS = {"fast_fused": fast.fast_fused, "fast_hf": fast.fast_hf, "consistent": consistent.consistent}
CALL_KEYWORDS = {"eps", "residual"}
