"""Float64 reference of token log-probabilities: x = logits / temperature (per row),
logp = log_softmax(x) = x - log(sum(exp(x))); gathered at the target token unless `full`.
"""
import torch


def logprob(logits, targets, temperatures, *, full=False):
    """logits [M, V], targets [M], temperatures [M] -> [M] (or [M, V] when full); float64."""
    x = logits.double() / temperatures.double()[:, None]
    logp = torch.log_softmax(x, dim=-1)
    return logp if full else logp.gather(-1, targets[:, None])[:, 0]
