"""Mamba-2's gated RMSNorm per group: h = y * silu(z); out = h * rsqrt(mean_g(h^2) + eps) * w.

The mean runs over each group of `group_size` channels. Consistency: fp32 throughout from the
scan's fp32 output, the position-independent sigmoid, a fixed-order group sum, one rounding. The
fast variant is transformers' MambaRMSNormGated: the scan output rounded to the activation dtype
first, the weight multiplied after a second rounding. Reference: gates/reference/ssm.py.
"""
from kernels.ops.gated_norm import consistent, fast

VARIANTS = {"fast": fast.fast, "consistent": consistent.consistent}
CALL_KEYWORDS = {"eps", "group_size"}
