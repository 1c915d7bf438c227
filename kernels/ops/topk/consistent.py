"""topk.consistent: experts by the unique key (score + bias desc, id asc), weights over the
slot-ordered sum (reduction.ordered_sum); hash routing weighs a table's experts the same way."""
import torch

from kernels.ops.reduction import ordered_sum
from kernels.ops.topk.forms import _normalised


def topk_consistent(scores, bias, *, top_k, scaling):
    """Experts by the unique key (score + bias desc, id asc): a stable descending sort keeps
    equal keys in id order. Slots follow the key. Weights: unbiased scores over their
    slot-ordered sum, then times `scaling` once. Returns (ids [M, k] int64, weights [M, k] fp32)."""
    key = scores + bias.float()  # [M, E]; +0.0 and -0.0 compare equal, so they tie too
    ids = torch.sort(key, dim=-1, descending=True, stable=True).indices[:, :top_k]
    return ids, hash_consistent(scores, ids, scaling=scaling)


def hash_consistent(scores, ids, *, scaling):
    """The experts' weights, given the experts (topk_consistent's choice, or DeepSeek-V4's frozen
    token -> experts table): unbiased scores over their slot-ordered sum, times `scaling`."""
    return _normalised(scores, ids, scaling, lambda c: ordered_sum(c).unsqueeze(-1))
