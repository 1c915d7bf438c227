"""router.consistent: the fp32 GEMM in row tiles and position-independent scores (sigmoid, or
DeepSeek-V4's sqrt(softplus)) built from torch.exp and torch.log."""
import torch

from kernels.ops.activation.consistent import position_independent_sigmoid, position_independent_softplus
from kernels.ops.linear.consistent import consistent as linear_consistent

SCORES = {"sigmoid": position_independent_sigmoid,
          "sqrtsoftplus": lambda logits: torch.sqrt(position_independent_softplus(logits))}


def router_consistent(x, w, *, row_multiple: int, scoring="sigmoid"):
    """fp32 GEMM in row tiles, position-independent scores: [M, E] fp32."""
    if scoring not in SCORES:
        raise ValueError(f"router scoring {scoring!r} is not one of {sorted(SCORES)}")
    return SCORES[scoring](linear_consistent(x.float(), w.float(), row_multiple=row_multiple))
