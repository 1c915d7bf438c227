"""Reference of DeepSeek-V4's lightning-indexer selection (kernels/ops/block_topk/): scores in
float64 from their definition, and the selection written out as a key sort in Python: for each
query, the visible blocks ranked by (score desc, position desc), the first k, ordered by position
descending, -1 for each missing one. Independent of the kernels' sort tricks."""
import torch


def scores(q, keys, weights, *, scale) -> torch.Tensor:
    """[T, S] float64: sum_h w_h * ReLU(q_h . k_s) * scale."""
    dots = torch.einsum("thd,sd->ths", q.double(), keys.double())
    return (torch.relu(dots) * scale * weights.double()[:, :, None]).sum(dim=1)


def select(scores, positions, *, top_k, compress_rate) -> torch.Tensor:
    """[T, top_k] int64 by the unique key, from Python sorts of (value, block) pairs."""
    num_blocks = scores.shape[-1]
    rows = []
    for row, position in zip(scores.tolist(), positions.tolist()):
        seen = (position + 1) // compress_rate
        ranked = sorted(range(min(seen, num_blocks)), key=lambda s: (-row[s], -s))[:top_k]
        rows.append(sorted(ranked, reverse=True) + [-1] * (top_k - len(ranked)))
    return torch.tensor(rows, dtype=torch.long).reshape(len(rows), top_k)
