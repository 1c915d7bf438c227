"""logprob's fast variants: the formulas engines and trainers use, equal algebraically and not
bitwise: log_softmax then gather (engine-style), x[t] - logsumexp(x) (trainer-style)."""
import torch

from kernels.ops.logprob.forms import scaled


def fast_log_softmax(logits, targets, temperatures, *, full=False):
    """Engine-style: torch.log_softmax over the row, then gather."""
    logp = torch.log_softmax(scaled(logits, temperatures), dim=-1)
    return logp if full else logp.gather(-1, targets[:, None])[:, 0]


def fast_logsumexp(logits, targets, temperatures, *, full=False):
    """Trainer-style selective log-softmax: x[t] - torch.logsumexp(x)."""
    x = scaled(logits, temperatures)
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    return x - lse if full else (x.gather(-1, targets[:, None]) - lse)[:, 0]
