"""Mamba-2's gated RMSNorm per group: h = y * silu(z); out = h * rsqrt(mean_g(h^2) + eps) * w; and
Gated DeltaNet's (Qwen3.5), the gate after the norm: out = y * rsqrt(mean_V(y^2) + eps) * w * silu(z)
per value head (GATE_AFTER, a family of its own: gated_norm_after).

The mean runs over each group of `group_size` channels. Consistency: fp32 throughout from the
scan's fp32 output, the position-independent sigmoid, a fixed-order group sum, one rounding. The
fast variant is transformers' MambaRMSNormGated: the scan output rounded to the activation dtype
first, the weight multiplied after a second rounding; GATE_AFTER's is transformers'
Qwen3_5MoeRMSNormGated, rounded after the weight and again after the gate. Reference:
gates/reference/ssm.py.
"""
from kernels.ops.gated_norm import consistent, fast

VARIANTS = {"fast": fast.fast, "consistent": consistent.consistent}
GATE_AFTER = {"fast": fast.gate_after, "consistent": consistent.gate_after}
CALL_KEYWORDS = {"eps", "group_size"}
