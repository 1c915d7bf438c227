"""attention.consistent: one walk over the keys in `block_kv` blocks from position 0, fp32 online
softmax, score and value GEMMs in row tiles (kernels/ops/linear/consistent.py); on CUDA the same
walk as one Triton kernel (triton.py), one launch over the engine's paged pool.
"""
from functools import partial

import torch

from kernels.ops.attention.forms import _each_segment, _grouped_rows, _query_positions, _ungrouped
from kernels.ops.linear.consistent import row_invariant_matmul
from kernels.ops.padding import pad_to_multiple


def consistent(q, k, v, segments, kv, *, scale, block_kv: int, row_multiple: int):
    """One arithmetic for prefill, chunked prefill, decode and the trainer."""
    kv.write_segments(segments, k, v)
    if q.device.type == "cuda":  # the same walk as one Triton kernel (imports Triton: CUDA only)
        import kernels.ops.attention.triton as attention_triton
        paged = kv.paged(segments)
        if paged is not None:  # the engine: one launch for every segment, read from the pool
            return attention_triton.consistent_paged(q, paged, scale=scale, block_kv=block_kv)
        return _each_segment(lambda rows, segment, keys, values: attention_triton.consistent_autograd(
            rows, keys, values, segment.start, scale=scale, block_kv=block_kv), q, segments, kv)
    return _each_segment(partial(_consistent_cpu, scale=scale, block_kv=block_kv, row_multiple=row_multiple),
                         q, segments, kv)


def _consistent_cpu(q, segment, keys, values, *, scale, block_kv, row_multiple):
    context, num_kv_heads, head_dim = keys.shape
    rows = _grouped_rows(q.float(), num_kv_heads)  # [Hkv, R, D]
    query_pos = _query_positions(segment, q.shape[1] // num_kv_heads, q.device)
    num_rows = rows.shape[1]
    running_max = torch.full((num_kv_heads, num_rows, 1), float("-inf"), device=q.device)
    running_sum = torch.zeros((num_kv_heads, num_rows, 1), device=q.device)
    acc = torch.zeros((num_kv_heads, num_rows, head_dim), device=q.device)
    for lo in range(0, context, block_kv):
        key_block = _padded_block(keys, lo, block_kv).permute(1, 2, 0)  # [Hkv, D, B]
        value_block = _padded_block(values, lo, block_kv).transpose(0, 1)  # [Hkv, B, D]
        scores = row_invariant_matmul(rows, key_block, row_multiple=row_multiple) * scale
        key_pos = torch.arange(lo, lo + block_kv, device=q.device)
        scores = scores.masked_fill(key_pos[None, :] > query_pos[:, None], float("-inf"))
        new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
        alpha = torch.exp(running_max - new_max)
        probs = torch.exp(scores - new_max)
        running_sum = running_sum * alpha + probs.sum(dim=-1, keepdim=True)
        acc = acc * alpha + row_invariant_matmul(probs, value_block, row_multiple=row_multiple)
        running_max = new_max
    return _ungrouped(acc / running_sum, segment.length, q.shape[1]).to(q.dtype)


def _padded_block(tensor, lo, block):
    """tensor[lo:lo+block] in fp32, zero-padded to `block` rows (masked by position)."""
    return pad_to_multiple(tensor[lo:lo + block].float(), 0, block)
