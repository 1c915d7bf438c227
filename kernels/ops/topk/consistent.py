"""topk.consistent: experts by the unique key (score + bias desc, id asc), weights over the
slot-ordered sum (moe_combine's fixed-order sum)."""
import torch

from kernels.ops.reduction import ordered_sum
from kernels.ops.topk.forms import _normalised


def topk_consistent(scores, bias, *, top_k, scaling):
    """Experts by the unique key (score + bias desc, id asc): a stable descending sort keeps
    equal keys in id order. Slots follow the key. Weights: unbiased scores over their
    slot-ordered sum, then times `scaling` once. Returns (ids [M, k] int64, weights [M, k] fp32)."""
    key = scores + bias.float()  # [M, E]; +0.0 and -0.0 compare equal, so they tie too
    ids = torch.sort(key, dim=-1, descending=True, stable=True).indices[:, :top_k]
    weights = _normalised(scores, ids, scaling, lambda c: ordered_sum(c).unsqueeze(-1))
    return ids, weights


def hash_consistent(scores, ids, *, scaling):
    """DeepSeek-V4's hash routing: the experts are given (a frozen token -> experts table), the
    weights as topk_consistent's: unbiased scores over their slot-ordered sum, times `scaling`."""
    return _normalised(scores, ids, scaling, lambda c: ordered_sum(c).unsqueeze(-1))
