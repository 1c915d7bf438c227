"""sink_attention's fast variants, as engines run them. Prefill: the entries cut to the call's longest
query, scores by matmul, a softmax over [scores, sink] (the sink's column dropped after), the output
by matmul. Decode (split-KV, flash-decoding): the entries in splits of `split`, each with its own max
and sum, merged by their log-sum-exp; the merge's rescaling moves the bits."""
import torch

DECODE_SPLIT = 4


def fast(q, entries, valid, sinks, *, scale):
    length = int(valid.sum(dim=-1).max()) if valid.numel() else 0
    kv, mask = entries[:, :length], valid[:, :length]
    scores = torch.matmul(q.float(), kv.float().transpose(1, 2)) * scale  # [T, H, L']
    scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
    sink = sinks.float()[None, :, None].expand(scores.shape[0], -1, 1)
    probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    return torch.matmul(probs.to(q.dtype), kv)


def fast_split_kv(q, entries, valid, sinks, *, scale, split: int = DECODE_SPLIT):
    """Each split's (max, sum, weighted sum), merged: out = sum_s e^(m_s - m) acc_s / (sum_s e^(m_s - m)
    l_s + e^(sink - m))."""
    q32, sink32 = q.float(), sinks.float()[None, :]
    parts = []
    for start in range(0, entries.shape[1], split):
        kv, mask = entries[:, start:start + split].float(), valid[:, start:start + split]
        scores = torch.matmul(q32, kv.transpose(1, 2)) * scale
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))
        top = scores.amax(dim=-1)
        safe = torch.where(torch.isinf(top), torch.zeros_like(top), top)
        weights = torch.exp(scores - safe[..., None])
        parts.append((top, weights.sum(dim=-1), torch.matmul(weights, kv)))
    top = torch.maximum(torch.stack([m for m, _, _ in parts]).amax(dim=0), sink32)
    total, acc = torch.exp(sink32 - top), torch.zeros_like(parts[0][2])
    for m, partial_sum, partial_acc in parts:
        factor = torch.where(torch.isinf(m), torch.zeros_like(m), torch.exp(m - top))
        total, acc = total + factor * partial_sum, acc + factor[..., None] * partial_acc
    return (acc / total[..., None]).to(q.dtype)
