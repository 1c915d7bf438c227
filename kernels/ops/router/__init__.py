"""Nemotron-H MoE router: scores = sigmoid(x.float() @ w_router.float()^T), [M, E] fp32.

Consistency: the fp32 GEMM in row tiles (linear.consistent), so a row's scores ignore the batch,
and the sigmoid by exp and division (activation's position-independent sigmoid: torch.sigmoid's
vector body and scalar tail round differently). Reference: gates/reference/moe.py.
"""
from kernels.ops.router import consistent, fast

VARIANTS = {"fast": fast.router_fast, "consistent": consistent.router_consistent}
CALL_KEYWORDS = frozenset()
