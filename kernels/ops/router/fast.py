"""router.fast: the GEMM in the activation dtype (the kernel follows M), torch's sigmoid,
sqrt(softplus) or softmax in fp32 (their vector bodies and scalar tails round differently)."""
import torch
import torch.nn.functional as F

from kernels.ops.linear.fast import fast as linear_fast

SCORES = {"sigmoid": torch.sigmoid, "sqrtsoftplus": lambda logits: torch.sqrt(F.softplus(logits)),
          "softmax": lambda logits: torch.softmax(logits, dim=-1)}


def router_fast(x, w, *, scoring="sigmoid"):
    """GEMM in the activation dtype, torch's score function in fp32: a score's bits follow its
    place in the batch."""
    if scoring not in SCORES:
        raise ValueError(f"router scoring {scoring!r} is not one of {sorted(SCORES)}")
    return SCORES[scoring](linear_fast(x, w.to(x.dtype)).float())
