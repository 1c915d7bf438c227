"""Nemotron-H MoE routed experts: y_e = down_e(relu(up_e(x))^2) for the (token, slot) pairs that
chose expert e, [M, k, H] per-slot outputs.

Consistency: row-tiled GEMMs (linear.consistent) per expert, its rows in routing order, so a row's
bits ignore how many tokens chose its expert; relu^2 rounded once. On CUDA two grouped Triton
GEMMs for all experts with the same bits (cuda.py, triton.py). The weight is applied in
expert_gemm.fast, or in moe_combine.consistent: pair by kind. Reference: gates/reference/moe.py.
"""
from kernels.ops.expert_gemm import consistent, fast

VARIANTS = {"fast": fast.experts_fast, "consistent": consistent.experts_consistent}
CALL_KEYWORDS = frozenset()
