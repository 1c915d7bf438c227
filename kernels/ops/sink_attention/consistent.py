"""sink_attention.consistent: fp32 products reduced over the last dim (D for the scores, the fixed
entry length L for the denominator and the output), so a query's bits depend on its own entries and
L alone; masked entries weigh exactly +0.0."""
import torch


def consistent(q, entries, valid, sinks, *, scale):
    """q [T, H, D], entries [T, L, D] (K = V), valid [T, L] bool, sinks [H] -> [T, H, D] in q's dtype."""
    q32, kv32, sink32 = q.float(), entries.float(), sinks.float()[None, :]
    scores = (q32[:, :, None, :] * kv32[:, None, :, :]).sum(dim=-1) * scale  # [T, H, L]
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    top = torch.maximum(scores.amax(dim=-1), sink32)  # [T, H]; a max is exact in any order
    weights = torch.exp(scores - top[..., None])
    total = weights.sum(dim=-1) + torch.exp(sink32 - top)
    p = weights / total[..., None]
    out = (p[:, :, None, :] * kv32.transpose(1, 2)[:, None, :, :]).sum(dim=-1)  # [T, H, D]
    return out.to(q.dtype)
