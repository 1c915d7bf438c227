"""MoE router: scores = f(x.float() @ w_router.float()^T), [M, E] fp32, f = sigmoid (Nemotron-H) or
sqrt(softplus) (DeepSeek-V4's `scoring`).

Consistency: the fp32 GEMM in row tiles (linear.consistent), so a row's scores ignore the batch,
and f from exp and log (activation's position-independent forms: torch.sigmoid's and F.softplus's
vector bodies and scalar tails round differently). Reference: gates/reference/moe.py.
"""
from kernels.ops.router import consistent, fast

VARIANTS = {"fast": fast.router_fast, "consistent": consistent.router_consistent}
CALL_KEYWORDS = {"scoring"}
