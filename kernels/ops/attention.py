"""Causal GQA attention for the segments of one forward over their KV store (paged or contiguous).

out_t = softmax(q_t . K[:start+t+1]^T * scale) V over its own sequence. Every variant writes the
case's K/V into the store, then reads each context back through it: one KV read path for every
phase and the trainer. Consistency: the consistent kernel walks keys in `block_kv` blocks from
position 0 with an fp32 online softmax, so decode replays prefill's arithmetic for a row (fully
masked blocks leave m, l, acc unchanged: alpha = 1, p = 0); score and value GEMMs run in row tiles
(one K order at any row count); CUDA: attention_triton.py. Reference: gates/reference/attention.py.
"""
import math
from functools import partial

import torch
import torch.nn.functional as F

from kernels.ops.linear import row_invariant_matmul
from kernels.ops.padding import pad_to_multiple

FAST_BLOCK_KV = 32  # the fast paged kernels' key block: 32 ran 1.45x faster than 64 at batch 64, contexts ~90 (H200)


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


def fast_sdpa(q, k, v, segments, kv, *, scale):
    """Prefill as engines run it. Over the engine's paged cache on CUDA: one varlen launch
    for every segment, read through the block tables (vLLM's FlashAttention varlen with paged
    KV), here the Triton walk at the fast key block. Otherwise torch SDPA per segment (its
    CPU flash kernel picks tiles by shape; on CUDA flash/efficient attention)."""
    kv.write_segments(segments, k, v)
    paged = kv.paged(segments) if q.device.type == "cuda" else None
    if paged is not None:
        from kernels.ops import attention_triton
        return attention_triton.consistent_paged(q, paged, scale=scale, block_kv=FAST_BLOCK_KV)
    return _each_segment(partial(_sdpa, scale=scale), q, segments, kv)


def _sdpa(q, segment, keys, values, *, scale):
    causal = None
    if segment.start:  # chunked prefill: the chunk sees the whole cached prefix
        causal = torch.ones(segment.length, keys.shape[0], dtype=torch.bool, device=q.device).tril(
            diagonal=segment.start)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), keys.transpose(0, 1), values.transpose(0, 1),
        attn_mask=causal, is_causal=causal is None, scale=scale, enable_gqa=True)
    return out.transpose(0, 1)


def fast_split_kv(q, k, v, segments, kv, *, scale, tokens_per_split: int, max_splits: int):
    """Flash-decoding: the context is cut into a number of splits that grows with its
    length, each split's softmax is local, and the splits are merged by log-sum-exp. On CUDA
    over the paged cache, one Triton launch for every segment (kernels/ops/attention_triton.py
    split_kv_paged); over contiguous K/V (the trainer's store), torch SDPA."""
    kv.write_segments(segments, k, v)
    paged = kv.paged(segments) if q.device.type == "cuda" else None
    if paged is not None:
        from kernels.ops import attention_triton
        splits = _splits_to_fill(q.device, len(segments) * k.shape[1], max_splits)
        return attention_triton.split_kv_paged(q, paged, scale=scale, block_kv=FAST_BLOCK_KV,
                                               tokens_per_split=tokens_per_split, max_splits=splits)
    if q.device.type == "cuda":
        return _each_segment(partial(_sdpa, scale=scale), q, segments, kv)
    return _each_segment(partial(_split_kv, scale=scale, tokens_per_split=tokens_per_split,
                                 max_splits=max_splits), q, segments, kv)


def _splits_to_fill(device, programs: int, max_splits: int) -> int:
    """Flash-decoding's heuristic: split the contexts only as far as it takes to give every
    SM two programs (a batch that fills the GPU gets no splits): a count that follows the
    batch, as tuned engines choose it), rounded down to a power of two so that a few
    compiled kernels serve every batch."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    fill = max(1, min(max_splits, (2 * sms) // max(1, programs)))
    return 1 << (fill.bit_length() - 1)


def _split_kv(q, segment, keys, values, *, scale, tokens_per_split, max_splits, workspace_dtype=torch.float32):
    """workspace_dtype: what each split's output is stored in before the merge (flash-decoding
    keeps fp32; gates/faults.py plants a bf16 workspace)."""
    context, num_kv_heads = keys.shape[0], keys.shape[1]
    num_splits = max(1, min(max_splits, math.ceil(context / tokens_per_split)))
    rows = _grouped_rows(q.float(), num_kv_heads)
    query_pos = _query_positions(segment, q.shape[1] // num_kv_heads, q.device)
    bounds = torch.linspace(0, context, num_splits + 1).round().long().tolist()
    outs, lses = [], []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        scores = rows @ keys[lo:hi].float().permute(1, 2, 0) * scale
        masked = torch.arange(lo, hi, device=q.device)[None, :] > query_pos[:, None]
        scores = scores.masked_fill(masked, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1, keepdim=True)
        probs = torch.exp(scores - lse).nan_to_num(0.0)
        outs.append((probs @ values[lo:hi].float().transpose(0, 1)).to(workspace_dtype).float())
        lses.append(lse)
    lse_all = torch.logsumexp(torch.stack(lses), dim=0)
    out = sum(torch.exp(lse - lse_all).nan_to_num(0.0) * o for lse, o in zip(lses, outs))
    return _ungrouped(out, segment.length, q.shape[1]).to(q.dtype)


def consistent(q, k, v, segments, kv, *, scale, block_kv: int, row_multiple: int):
    """One arithmetic for prefill, chunked prefill, decode and the trainer."""
    kv.write_segments(segments, k, v)
    if q.device.type == "cuda":  # the same walk as one Triton kernel (imports Triton: CUDA only)
        from kernels.ops import attention_triton
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
