"""attention's shared torch helpers: query heads grouped by their KV head as rows ([T, Hq, D]
<-> [Hkv, T*G, D]), each row's position, and the per-segment loop over the KV store's read
path; the fast split walk (fast.py) and the consistent CPU walk (consistent.py) both use them.
"""
import torch


def _grouped_rows(q, num_kv_heads):
    """[T, Hq, D] -> [Hkv, T*G, D]: the G query heads sharing a KV head become rows."""
    num_tokens, num_q_heads, head_dim = q.shape
    group = num_q_heads // num_kv_heads
    return q.reshape(num_tokens, num_kv_heads, group, head_dim).permute(1, 0, 2, 3).reshape(
        num_kv_heads, num_tokens * group, head_dim)


def _ungrouped(rows, num_tokens, num_q_heads):
    """[Hkv, T*G, D] -> [T, Hq, D]."""
    num_kv_heads, _, head_dim = rows.shape
    group = num_q_heads // num_kv_heads
    return rows.reshape(num_kv_heads, num_tokens, group, head_dim).permute(1, 0, 2, 3).reshape(
        num_tokens, num_q_heads, head_dim)


def _query_positions(segment, num_kv_heads_group, device):
    positions = torch.arange(segment.start, segment.start + segment.length, device=device)
    return positions.repeat_interleave(num_kv_heads_group)  # row (t, g) -> position of t


def _each_segment(attend, q, segments, kv):
    """[M, Hq, D]: attend(q rows, segment, keys, values) for each segment, in row order."""
    return torch.cat([attend(q[s.rows], s, *kv.read(s)) for s in segments])
