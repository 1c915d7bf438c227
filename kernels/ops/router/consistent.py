"""router.consistent: the fp32 GEMM in row tiles and position-independent scores (sigmoid,
DeepSeek-V4's sqrt(softplus), built from torch.exp and torch.log, or Qwen3.5's softmax over the
experts with a fixed-order sum)."""
import torch

from kernels.ops.activation.consistent import position_independent_sigmoid, position_independent_softplus
from kernels.ops.linear.consistent import consistent as linear_consistent
from kernels.ops.reduction import row_sum


def _softmax(logits):
    """exp(l - max) over a sum in an order fixed by the row's length (the max is exact in any order)."""
    shifted = torch.exp(logits - logits.amax(dim=-1, keepdim=True))
    return shifted / row_sum(shifted)


SCORES = {"sigmoid": position_independent_sigmoid,
          "sqrtsoftplus": lambda logits: torch.sqrt(position_independent_softplus(logits)),
          "softmax": _softmax}


def router_consistent(x, w, *, row_multiple: int, scoring="sigmoid"):
    """fp32 GEMM in row tiles, position-independent scores: [M, E] fp32."""
    if scoring not in SCORES:
        raise ValueError(f"router scoring {scoring!r} is not one of {sorted(SCORES)}")
    return SCORES[scoring](linear_consistent(x.float(), w.float(), row_multiple=row_multiple))
