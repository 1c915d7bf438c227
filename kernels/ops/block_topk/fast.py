"""block_topk's fast variants, as the reference implementation and engines run them: the scores
by one matmul over the call's queries and blocks, then a head-weighted sum; torch.topk on the
masked scores, the chosen blocks in score order (ties in whatever order the kernel leaves them)."""
import torch
import torch.nn.functional as F

from kernels.ops.block_topk.forms import visible, with_sentinel


def score_fast(q, keys, weights, *, scale):
    """q [T, H, D], keys [S, D], weights [T, H] -> [T, S] fp32."""
    scores = F.relu(torch.matmul(q.float(), keys.float().transpose(0, 1))) * scale  # [T, H, S]
    return (scores * weights.float()[:, :, None]).sum(dim=1)


def select_fast(scores, positions, *, top_k, compress_rate):
    """[T, top_k] int64 block ids by torch.topk, -1 where the query sees fewer than top_k blocks."""
    k = min(top_k, scores.shape[-1])
    masked = scores.masked_fill(~visible(positions, scores.shape[-1], compress_rate), float("-inf"))
    return with_sentinel(masked.topk(k, dim=-1).indices, positions, compress_rate, top_k)
