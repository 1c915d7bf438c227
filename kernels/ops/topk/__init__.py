"""MoE top-k (Nemotron-H, DeepSeek-V4): ids = top_k by (score + bias desc, id asc); w = scaling * s_ids /
(sum_slots s_ids + 1e-20) (the bias only chooses). DeepSeek-V4's hash layers take ids from a frozen
token -> experts table (HASH, the hash_topk family) and weigh them alike.

Consistency: a stable descending sort of the biased scores (ties to the lowest id), the weights
over an fp32 slot-order sum, times `scaling` once. Reference: gates/reference/moe.py.
"""
from kernels.ops.topk import consistent, fast

VARIANTS = {"fast": fast.topk_fast, "consistent": consistent.topk_consistent}
HASH = {"fast": fast.hash_fast, "consistent": consistent.hash_consistent}
CALL_KEYWORDS = {"top_k", "scaling"}
