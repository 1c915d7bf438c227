"""Float64 reference of causal GQA attention for one sequence segment:
out[t, h] = softmax_j(q[t, h] . K[j, h // G] * scale) V[j, h // G] over keys j <= start + t,
where the segment's token t sits at absolute position start + t and G = Hq / Hkv.
"""
import torch


def causal_gqa(q, keys, values, start, *, scale):
    """q [T, Hq, D]; keys, values [C, Hkv, D]: the sequence's context from position 0,
    C >= start + T (later keys are masked). Returns [T, Hq, D] in float64."""
    num_tokens, num_q_heads, _ = q.shape
    group = num_q_heads // keys.shape[1]
    k64 = keys.double().repeat_interleave(group, dim=1)  # [C, Hq, D]
    v64 = values.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("thd,chd->htc", q.double(), k64) * scale  # [Hq, T, C]
    query_pos = torch.arange(start, start + num_tokens)
    key_pos = torch.arange(keys.shape[0])
    scores = scores.masked_fill(key_pos[None, :] > query_pos[:, None], float("-inf"))
    return torch.einsum("htc,chd->thd", torch.softmax(scores, dim=-1), v64)
