"""MoE routed experts: y_e = down_e(act(up_e(x))) for the (token, slot) pairs that chose expert e,
[M, k, H] per-slot outputs; act = relu^2 (Nemotron-H) or, with `swiglu_limit` L (DeepSeek-V4, up
holding [gate | up] rows), SiLU(min(gate, L)) * clamp(up, -L, L).

Consistency: row-tiled GEMMs (linear.consistent) per expert, its rows in routing order, so a row's
bits ignore how many tokens chose its expert; the activation rounded once. On CUDA two grouped Triton
GEMMs for all experts with the same bits (cuda.py, triton.py). The weight is applied in
expert_gemm.fast, or in moe_combine.consistent: pair by kind. Reference: gates/reference/moe.py.
"""
from kernels.ops.expert_gemm import consistent, fast

VARIANTS = {"fast": fast.experts_fast, "consistent": consistent.experts_consistent}
CALL_KEYWORDS = {"swiglu_limit"}
