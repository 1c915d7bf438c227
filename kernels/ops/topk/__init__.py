"""Nemotron-H MoE top-k: ids = top_k by (score + bias desc, id asc); w = scaling * s_ids /
(sum_slots s_ids + 1e-20) (the bias only chooses).

Consistency: a stable descending sort of the biased scores (ties to the lowest id), the weights
over an fp32 slot-order sum, times `scaling` once. Reference: gates/reference/moe.py.
"""
from kernels.ops.topk import consistent, fast

VARIANTS = {"fast": fast.topk_fast, "consistent": consistent.topk_consistent}
CALL_KEYWORDS = {"top_k", "scaling"}
