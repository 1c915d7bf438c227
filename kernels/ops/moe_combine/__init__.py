"""Nemotron-H MoE combine: out = sum_slots w * y_id(x) + shared(x).

Consistency: fp32 slot-order sums (slot 0 first, k adds), each weight applied once, one rounding.
The weight is applied in expert_gemm.fast, or in moe_combine.consistent: pair by kind.
Reference: gates/reference/moe.py.
"""
from kernels.ops.moe_combine import consistent, fast

VARIANTS = {"fast": fast.combine_fast, "consistent": consistent.combine_consistent}
CALL_KEYWORDS = frozenset()
