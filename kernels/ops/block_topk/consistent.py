"""block_topk's consistent variants: each score an elementwise product summed over D (torch reduces
an inner dim of many rows serially, in an order fixed by D) and then over heads one at a time; the
selection by a stable descending sort of the blocks in reversed order (ties to the larger position),
then the chosen k sorted by position, descending, so the attention that follows sums them in one
order whatever the phase. On CUDA the scores are one Triton kernel for both runtimes (triton.py)."""
import torch

from kernels.ops.block_topk.forms import visible, with_sentinel


def score_consistent(q, keys, weights, *, scale):
    """q [T, H, D], keys [S, D], weights [T, H] -> [T, S] fp32, each entry independent of T and S."""
    if q.device.type == "cuda":
        import kernels.ops.block_topk.triton as block_topk_triton  # imports Triton: CUDA machines only
        return block_topk_triton.score(q, keys, weights, scale=scale)
    q32, k32, w32 = q.float(), keys.float(), weights.float()
    total = None
    for head in range(q32.shape[1]):
        dots = (q32[:, head, None, :] * k32[None, :, :]).sum(dim=-1)  # [T, S]
        term = torch.relu(dots) * scale * w32[:, head, None]
        total = term if total is None else total + term
    return total


def select_consistent(scores, positions, *, top_k, compress_rate):
    """[T, top_k] int64 block ids by the unique key (score desc, position desc), ordered by position
    descending, -1 (last) where the query sees fewer than k blocks. +0.0 and -0.0 tie."""
    num_blocks = scores.shape[-1]
    k = min(top_k, num_blocks)
    masked = scores.masked_fill(~visible(positions, num_blocks, compress_rate), float("-inf"))
    order = torch.sort(masked.flip(-1), dim=-1, descending=True, stable=True).indices[:, :k]
    chosen = with_sentinel(num_blocks - 1 - order, positions, compress_rate, top_k)
    return torch.sort(chosen, dim=-1, descending=True).values
