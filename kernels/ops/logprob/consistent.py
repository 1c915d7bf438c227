"""logprob.consistent: one formula for both sides, x[t] - (max + log(sum exp(x - max))), the row
sum in a batch-independent order (kernels/ops/reduction.py)."""
import torch

from kernels.ops.logprob.forms import scaled
from kernels.ops.reduction import row_sum


def consistent(logits, targets, temperatures, *, full=False):
    """One formula for both sides: max-shifted sum of exp, row by row, in fp32."""
    x = scaled(logits, temperatures)
    row_max = x.amax(dim=-1, keepdim=True)
    lse = row_max + torch.log(row_sum(torch.exp(x - row_max)))
    return x - lse if full else (x.gather(-1, targets[:, None]) - lse)[:, 0]
