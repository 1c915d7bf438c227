"""MoE router: scores = f(x.float() @ w_router.float()^T), [M, E] fp32, f = sigmoid (Nemotron-H),
sqrt(softplus) (DeepSeek-V4) or softmax over the experts (Qwen3.5), the model's `scoring`.

Consistency: the fp32 GEMM in row tiles (linear.consistent), so a row's scores ignore the batch,
and f from exp and log (activation's position-independent forms: torch.sigmoid's and F.softplus's
vector bodies and scalar tails round differently);
softmax's sum in an order fixed by the number of experts. Reference: gates/reference/moe.py.
"""
from kernels.ops.router import consistent, fast

VARIANTS = {"fast": fast.router_fast, "consistent": consistent.router_consistent}
CALL_KEYWORDS = {"scoring"}
