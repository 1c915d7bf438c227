"""attention's fast variants: prefill as engines run it (torch SDPA, or over the paged cache on
CUDA the Triton walk at the fast key block) and flash-decoding (split-KV, merged by log-sum-exp).
"""
import math
from functools import partial

import torch
import torch.nn.functional as F

from kernels.ops.attention.forms import _each_segment, _grouped_rows, _query_positions, _ungrouped

FAST_BLOCK_KV = 32  # the fast paged kernels' key block: 32 ran 1.45x faster than 64 at batch 64, contexts ~90 (H200)


def fast_sdpa(q, k, v, segments, kv, *, scale):
    """Prefill as engines run it. Over the engine's paged cache on CUDA: one varlen launch
    for every segment, read through the block tables (vLLM's FlashAttention varlen with paged
    KV), here the Triton walk at the fast key block. Otherwise torch SDPA per segment (its
    CPU flash kernel picks tiles by shape; on CUDA flash/efficient attention)."""
    kv.write_segments(segments, k, v)
    paged = kv.paged(segments) if q.device.type == "cuda" else None
    if paged is not None:
        import kernels.ops.attention.triton as attention_triton
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
    over the paged cache, one Triton launch for every segment (kernels/ops/attention/triton.py
    split_kv_paged); over contiguous K/V (the trainer's store), torch SDPA."""
    kv.write_segments(segments, k, v)
    paged = kv.paged(segments) if q.device.type == "cuda" else None
    if paged is not None:
        import kernels.ops.attention.triton as attention_triton
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
