"""Log-probability of chosen tokens: logp = x[t] - logsumexp(x), x = logits / temperature, in fp32.

Also the full log-softmax. Engines and trainers usually reach this number by different formulas
(log_softmax then gather; x[t] - logsumexp(x)): equal algebraically, not bitwise. The consistent
variant is one formula with one row reduction in a batch-independent order (reduction.py), called
by both sides; on CUDA outside autograd its temperature division is one Triton pass with the same
bits (logprob_triton.py). Reference: gates/reference/logprob.py.
"""
import torch

from kernels.ops.autograd_use import records_graph
from kernels.ops.reduction import row_sum


def scaled(logits, temperatures):
    """[B, V] fp32 logits over each row's temperature, in one pass: half logits widen inside
    the division (exact, so the bits of .float() first). temperatures None: `logits` are
    already over their temperature (a graph head scales once for its draw and log-prob)."""
    if logits.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        logits = logits.float()
    if temperatures is None:
        return logits.float()
    if logits.device.type == "cuda" and logits.dim() == 2 and logits.is_contiguous() and not records_graph(logits):
        from kernels.ops import logprob_triton  # imports Triton: CUDA machines only
        return logprob_triton.scale_rows(logits, temperatures)
    return logits / temperatures.float()[:, None]


def fast_log_softmax(logits, targets, temperatures, *, full=False):
    """Engine-style: torch.log_softmax over the row, then gather."""
    logp = torch.log_softmax(scaled(logits, temperatures), dim=-1)
    return logp if full else logp.gather(-1, targets[:, None])[:, 0]


def fast_logsumexp(logits, targets, temperatures, *, full=False):
    """Trainer-style selective log-softmax: x[t] - torch.logsumexp(x)."""
    x = scaled(logits, temperatures)
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    return x - lse if full else (x.gather(-1, targets[:, None]) - lse)[:, 0]


def consistent(logits, targets, temperatures, *, full=False):
    """One formula for both sides: max-shifted sum of exp, row by row, in fp32."""
    x = scaled(logits, temperatures)
    row_max = x.amax(dim=-1, keepdim=True)
    lse = row_max + torch.log(row_sum(torch.exp(x - row_max)))
    return x - lse if full else (x.gather(-1, targets[:, None]) - lse)[:, 0]
