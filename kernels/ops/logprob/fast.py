"""logprob's fast variants: the formulas engines and trainers use, equal algebraically and not
bitwise: log_softmax then gather (engine-style; on CUDA, where nothing needs a gradient, fused as
tuned engines fuse it: one online-softmax pass over the logits, rows_triton.py), x[t] -
logsumexp(x) (trainer-style)."""
import torch

from kernels.ops.autograd_use import records_graph
from kernels.ops.logprob.forms import scaled


def fast_log_softmax(logits, targets, temperatures, *, full=False):
    """Engine-style: torch.log_softmax over the row, then gather; on CUDA outside autograd the
    chosen token's log-prob alone, in one fused pass (rows_triton.fast_rows)."""
    if (not full and temperatures is not None and logits.device.type == "cuda" and logits.dim() == 2
            and not records_graph(logits)):
        import kernels.ops.logprob.rows_triton as rows_triton  # imports Triton: CUDA machines only
        return rows_triton.fast_rows(logits, targets, temperatures)
    logp = torch.log_softmax(scaled(logits, temperatures), dim=-1)
    return logp if full else logp.gather(-1, targets[:, None])[:, 0]


def fast_logsumexp(logits, targets, temperatures, *, full=False):
    """Trainer-style selective log-softmax: x[t] - torch.logsumexp(x)."""
    x = scaled(logits, temperatures)
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    return x - lse if full else (x.gather(-1, targets[:, None]) - lse)[:, 0]
