"""topk.fast: torch.topk of the biased scores (tie order unspecified), torch's row sum."""
import torch

from kernels.ops.topk.forms import _normalised


def topk_fast(scores, bias, *, top_k, scaling):
    """torch.topk of the biased scores (tie order unspecified; on CPU it is not the lowest
    id), weights normalised with torch's row sum."""
    ids = torch.topk(scores + bias.float(), top_k, dim=-1).indices
    return ids, hash_fast(scores, ids, scaling=scaling)


def hash_fast(scores, ids, *, scaling):
    """The chosen (or a hash table's) experts' weights with torch's row sum."""
    return _normalised(scores, ids, scaling, lambda c: c.sum(dim=-1, keepdim=True))
