"""Causal GQA attention on CUDA via Triton: attention.consistent's kernel (and fast split-KV).

Rows (token, query head), BLOCK_M to a program, walk the keys in `block_kv` blocks from position 0
with an fp32 online softmax ("ieee" fp32 dots; half p cast to V's dtype), out = acc / l rounded
once. Blocks past a row's last key are fully masked and leave m, l, acc unchanged (alpha set to 1
when m' == m; p = 0); BLOCK_M, the walk and LAUNCH_TABLE follow only D, dtype and block_kv: decode,
prefill, any chunk split, the trainer and contiguous, varlen or paged K/V give the same bits (MMA
slot independence: benchmarks/gpu_kernel_check.py). Reference: gates/reference/attention.py.
"""
import torch
import triton
import triton.language as tl

from kernels.ops.pdl import launch_options, wait_for_inputs

BLOCK_M = 16  # query rows per program, whatever T is (decode pads)
# (head_dim, dtype) -> (num_warps, num_stages); any other pair uses DEFAULT_LAUNCH. Never keyed by T or C.
LAUNCH_TABLE = {(128, torch.bfloat16): (4, 2), (128, torch.float16): (4, 2), (64, torch.bfloat16): (4, 2)}
DEFAULT_LAUNCH = (4, 2)
# How a key block is loaded: "columns" ([D, keys], the dot's operand as it comes) or "rows"
# ([keys, D], each key's D contiguous, transposed for the dot). The same values reach the
# same dot, so the bits are the same; only the load differs (benchmarks/gpu_attention_decode.py).
K_LOAD = "rows"


@triton.jit(do_not_specialize=["num_tokens_arg", "query_start_arg", "page_size", "tokens_per_split", "stride_table"],
            do_not_specialize_on_alignment=["rows_ptr", "lengths_ptr", "starts_ptr", "table_ptr"])
def _attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, m_ptr, l_ptr, rows_ptr, lengths_ptr, starts_ptr, table_ptr,
                      num_tokens_arg, query_start_arg, scale, page_size, tokens_per_split,
                      stride_qt, stride_qh, stride_kb, stride_kc, stride_kh, stride_vb, stride_vc, stride_vh,
                      stride_os, stride_ot, stride_oh, stride_ms, stride_mt, stride_table,
                      GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_KV: tl.constexpr, VARLEN: tl.constexpr,
                      PAGED: tl.constexpr, MAX_SPLITS: tl.constexpr, IS_FP32: tl.constexpr,
                      K_ROWS: tl.constexpr, PDL: tl.constexpr):
    wait_for_inputs(PDL)
    tile, kv_head = tl.program_id(0), tl.program_id(1)
    seq, split = tl.program_id(2) // MAX_SPLITS, tl.program_id(2) % MAX_SPLITS
    if VARLEN:  # one segment per sequence: its first row, its length and its first position
        row0 = tl.load(rows_ptr + seq).to(tl.int64)
        num_tokens = tl.load(lengths_ptr + seq)
        query_start = tl.load(starts_ptr + seq)
    else:
        row0, num_tokens, query_start = 0, num_tokens_arg, query_start_arg
    if tile * BLOCK_M < num_tokens * GROUP:  # segments shorter than the longest leave tiles idle
        rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)  # row = token * GROUP + member of the group
        is_row = rows < num_tokens * GROUP
        token, head = rows // GROUP, kv_head * GROUP + rows % GROUP
        query_pos = query_start + token  # absolute position of each row's token
        offs_d = tl.arange(0, BLOCK_D)
        is_d = offs_d < HEAD_DIM
        q_rows = (row0 + token[:, None]) * stride_qt + head[:, None] * stride_qh
        q = tl.load(q_ptr + q_rows + offs_d[None, :], mask=is_row[:, None] & is_d[None, :], other=0.0)
        # last key any (real) row of the tile needs, + 1; keys past it are never loaded
        last_token = (tl.minimum(tile * BLOCK_M + BLOCK_M, num_tokens * GROUP) - 1) // GROUP
        lo_start, hi = 0, query_start + last_token + 1
        if MAX_SPLITS > 1:  # flash-decoding (fast): the split count follows the context length
            context = query_start + num_tokens
            num_splits = tl.minimum(MAX_SPLITS, tl.cdiv(context, tokens_per_split))
            lo_start = (split * context) // num_splits
            hi = tl.where(split < num_splits, tl.minimum(hi, ((split + 1) * context) // num_splits), 0)
        m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        offs_kv = tl.arange(0, BLOCK_KV)
        for lo in range(lo_start, hi, BLOCK_KV):  # consistent: from absolute position 0, whatever the phase
            key_pos = lo + offs_kv
            is_key = key_pos < hi
            if PAGED:  # the pool slot of each position, through the sequence's block table
                page = tl.load(table_ptr + seq * stride_table + key_pos // page_size, mask=is_key, other=0)
                slot = page.to(tl.int64) * page_size + key_pos % page_size
                k_at = k_ptr + slot * stride_kc + kv_head * stride_kh
                v_at = v_ptr + slot * stride_vc + kv_head * stride_vh
            else:
                k_at = k_ptr + seq.to(tl.int64) * stride_kb + key_pos * stride_kc + kv_head * stride_kh
                v_at = v_ptr + seq.to(tl.int64) * stride_vb + key_pos * stride_vc + kv_head * stride_vh
            # an FP8 pool dequantizes as kv_decode does: e4m3 -> fp32 -> the activation dtype (exact)
            if K_ROWS:
                k = tl.trans(tl.load(k_at[:, None] + offs_d[None, :], mask=is_key[:, None] & is_d[None, :],
                                     other=0.0).to(tl.float32).to(q.dtype))  # [BLOCK_D, BLOCK_KV]
            else:
                k = tl.load(k_at[None, :] + offs_d[:, None], mask=is_key[None, :] & is_d[:, None],
                            other=0.0).to(tl.float32).to(q.dtype)  # [BLOCK_D, BLOCK_KV]
            v = tl.load(v_at[:, None] + offs_d[None, :], mask=is_key[:, None] & is_d[None, :],
                        other=0.0).to(tl.float32).to(q.dtype)  # [BLOCK_KV, BLOCK_D]
            if IS_FP32:
                s = tl.dot(q, k, input_precision="ieee") * scale
            else:
                s = tl.dot(q, k) * scale
            # causal mask; keys past `hi` are masked too (the consistent walk's are past every
            # row's position already; a split's end can fall before a row's position)
            s = tl.where((key_pos[None, :] > query_pos[:, None]) | ~is_key[None, :], float("-inf"), s)
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.where(m_new == m_i, 1.0, tl.exp(m_i - m_new))
            # a row with no key yet (only in a split that starts past it) keeps p = 0, not NaN
            p = tl.exp(s - tl.where(m_new == float("-inf"), 0.0, m_new)[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            if IS_FP32:
                pv = tl.dot(p, v, input_precision="ieee")
            else:
                pv = tl.dot(p.to(v.dtype), v)
            acc = acc * alpha[:, None] + pv
            m_i = m_new
        o_rows = split * stride_os + (row0 + token[:, None]) * stride_ot + head[:, None] * stride_oh
        if MAX_SPLITS > 1:  # the split's unnormalised partial; split_kv_paged merges them
            tl.store(o_ptr + o_rows + offs_d[None, :], acc, mask=is_row[:, None] & is_d[None, :])
            ml_rows = split * stride_ms + (row0 + token) * stride_mt + head
            tl.store(m_ptr + ml_rows, m_i, mask=is_row)
            tl.store(l_ptr + ml_rows, l_i, mask=is_row)
        else:
            tl.store(o_ptr + o_rows + offs_d[None, :], (acc / l_i[:, None]).to(o_ptr.dtype.element_ty),
                     mask=is_row[:, None] & is_d[None, :])


def _check(q, keys, values):
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16) or keys.dtype != values.dtype or (
            keys.dtype not in (q.dtype, torch.float8_e4m3fn)):
        raise ValueError(f"attention: q of fp32/fp16/bf16 and keys, values of q's dtype (or FP8 E4M3 pools), "
                         f"got {q.dtype}, {keys.dtype}, {values.dtype}")
    if q.shape[-2] % keys.shape[-2] or keys.shape != values.shape or q.shape[-1] != keys.shape[-1]:
        raise ValueError(f"attention: shapes q {tuple(q.shape)}, keys {tuple(keys.shape)}, "
                         f"values {tuple(values.shape)} (Hq must be a multiple of Hkv)")
    return [t if t.stride(-1) == 1 else t.contiguous() for t in (q, keys, values)]


def _launch(q, keys, values, *, scale, block_kv, segments=None, table=None, page_size=1, num_tokens=0,
            query_start=0, max_tokens=None, splits=None):
    """q [M, Hq, D] rows. Contiguous K/V: keys, values [B, C, Hkv, D] (B = 1 without
    `segments`). Paged: `table` [B, blocks] and keys, values the pool [slots, Hkv, D].
    segments: (rows, lengths, starts) [B] int tensors on q's device, or None for one
    sequence of `num_tokens` rows from `query_start`. splits: (tokens_per_split, max_splits)
    for the fast flash-decoding partials, returned as (acc, m, sums); else the output."""
    q, keys, values = _check(q, keys, values)
    num_rows, num_q_heads, head_dim = q.shape
    num_kv_heads = keys.shape[-2]
    if block_kv < 16 or block_kv & (block_kv - 1):
        raise ValueError(f"block_kv {block_kv} must be a power of two >= 16")
    group = num_q_heads // num_kv_heads
    num_seqs = 1 if segments is None else segments[0].shape[0]
    max_splits = 1 if splits is None else splits[1]
    if splits is None:
        out = torch.empty_like(q)
        m = sums = out
    else:
        out = torch.zeros((max_splits, *q.shape), dtype=torch.float32, device=q.device)
        m = torch.full((max_splits, num_rows, num_q_heads), float("-inf"), device=q.device)
        sums = torch.zeros((max_splits, num_rows, num_q_heads), device=q.device)
    if q.numel() == 0:
        return out if splits is None else (out, m, sums)
    longest = num_tokens if max_tokens is None else max_tokens
    grid = (triton.cdiv(longest * group, BLOCK_M), num_kv_heads, num_seqs * max_splits)
    num_warps, num_stages = LAUNCH_TABLE.get((head_dim, q.dtype), DEFAULT_LAUNCH)
    rows, lengths, starts = segments if segments is not None else (q, q, q)
    out_strides = out.stride() if splits is not None else (0, *out.stride())
    k_strides = (0, *keys.stride()[:2]) if table is not None else keys.stride()[:3]
    v_strides = (0, *values.stride()[:2]) if table is not None else values.stride()[:3]
    _attention_kernel[grid](
        q, keys, values, out, m, sums, rows, lengths, starts, table if table is not None else q,
        num_tokens, query_start, scale, page_size, 1 if splits is None else splits[0],
        *q.stride()[:2], *k_strides, *v_strides, *out_strides[:3],
        *(m.stride()[:2] if splits is not None else (0, 0)), table.stride(0) if table is not None else 0,
        GROUP=group, HEAD_DIM=head_dim, BLOCK_D=max(16, triton.next_power_of_2(head_dim)), BLOCK_M=BLOCK_M,
        BLOCK_KV=block_kv, VARLEN=segments is not None, PAGED=table is not None, MAX_SPLITS=max_splits,
        IS_FP32=q.dtype == torch.float32, K_ROWS=K_LOAD == "rows", num_warps=num_warps, num_stages=num_stages,
        **launch_options(q.device))
    return out if splits is None else (out, m, sums)


def consistent(q, keys, values, query_start: int, *, scale: float, block_kv: int):
    """q [T, Hq, D] at absolute positions query_start .. query_start+T-1; keys, values
    [C, Hkv, D], the whole context from position 0 (C >= query_start + T) -> [T, Hq, D]."""
    if keys.shape[0] < query_start + q.shape[0]:
        raise ValueError(f"context {keys.shape[0]} < query_start {query_start} + T {q.shape[0]}")
    return _launch(q, keys[None], values[None], scale=scale, block_kv=block_kv, num_tokens=q.shape[0],
                   query_start=query_start)


def consistent_batched(q, keys, values, query_starts, *, scale: float, block_kv: int):
    """B segments of T tokens each in one launch (e.g. a decode step): q [B, T, Hq, D];
    keys, values [B, C, Hkv, D] padded to a common C; query_starts [B] int64 on q's device
    (sequence b's context is keys[b, :query_starts[b] + T], not checked here). Each row
    gives the same bits as `consistent` on that sequence alone."""
    batch, num_tokens = q.shape[:2]
    rows = torch.arange(batch, device=q.device) * num_tokens
    segments = (rows, torch.full_like(rows, num_tokens), query_starts)
    out = _launch(q.reshape(batch * num_tokens, *q.shape[2:]), keys, values, scale=scale, block_kv=block_kv,
                  segments=segments, max_tokens=num_tokens)
    return out.reshape(q.shape)


def consistent_paged(q, paged, *, scale: float, block_kv: int):
    """Every segment of a forward in one launch, K/V read from the paged pool through the
    block tables (kernels/engine/cache.py PagedBatch): q [M, Hq, D] -> [M, Hq, D]. Each row
    gives the bits of `consistent` on its sequence alone: the same walk over the same values."""
    tables = paged.tables
    return _launch(q, paged.key_pool, paged.value_pool, scale=scale, block_kv=block_kv,
                   segments=(tables.rows, tables.lengths, tables.starts), table=tables.block_table,
                   page_size=paged.page_size, max_tokens=tables.max_length)


def split_kv_paged(q, paged, *, scale: float, block_kv: int, tokens_per_split: int, max_splits: int):
    """The fast contract's flash-decoding over the paged pool: each sequence's context is
    cut into min(max_splits, ceil(C / tokens_per_split)) splits (a count that follows C;
    the caller's max_splits follows the batch), each split runs its own online softmax, and
    the partials merge by their maxima."""
    tables = paged.tables
    if max_splits == 1:  # nothing to merge: the walk alone (at the fast key block)
        return consistent_paged(q, paged, scale=scale, block_kv=block_kv)
    acc, m, sums = _launch(q, paged.key_pool, paged.value_pool, scale=scale, block_kv=block_kv,
                        segments=(tables.rows, tables.lengths, tables.starts), table=tables.block_table,
                        page_size=paged.page_size, max_tokens=tables.max_length,
                        splits=(tokens_per_split, max_splits))
    return merged_splits(acc, m, sums, q.dtype)


def merged_splits(acc, m, sums, dtype):
    """Flash-decoding's merge of split partials (acc [S, M, H, D], maxima m and sums [S, M, H])
    by their maxima, rounded once to `dtype`."""
    weight = torch.exp(m - m.amax(dim=0)).nan_to_num(0.0)  # an empty split (-inf - finite) weighs 0
    return ((weight[..., None] * acc).sum(dim=0) / (weight * sums).sum(dim=0)[..., None]).to(dtype)


def _recomputed_fp32(q, keys, values, query_start, scale):
    """The CPU-style formula in differentiable fp32 torch ops: [T, Hq, D] fp32."""
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = keys.shape[1]
    grouped = q.float().reshape(num_tokens, num_kv_heads, num_q_heads // num_kv_heads, head_dim)
    scores = torch.einsum("tkgd,ckd->kgtc", grouped, keys.float()) * scale  # [Hkv, G, T, C]
    query_pos = torch.arange(query_start, query_start + num_tokens, device=q.device)
    key_pos = torch.arange(keys.shape[0], device=q.device)
    scores = scores.masked_fill(key_pos[None, :] > query_pos[:, None], float("-inf"))
    out = torch.einsum("kgtc,ckd->tkgd", torch.softmax(scores, dim=-1), values.float())
    return out.reshape(num_tokens, num_q_heads, head_dim)


class ConsistentAttention(torch.autograd.Function):
    """Forward: the consistent kernel (the bits the engine computes). Backward: recomputes
    attention with fp32 torch ops and differentiates that. The backward is not bitwise
    equal to anything (gate C8 compares it to a float64 reference within a tolerance); it
    is deterministic: fixed shapes, no atomics, the same ops in the same order every run."""

    @staticmethod
    def forward(ctx, q, keys, values, query_start, scale, block_kv):
        ctx.save_for_backward(q, keys, values)
        ctx.query_start, ctx.scale = query_start, scale
        return consistent(q, keys, values, query_start, scale=scale, block_kv=block_kv)

    @staticmethod
    def backward(ctx, grad_out):
        q, keys, values = ctx.saved_tensors
        with torch.enable_grad():
            inputs = [t.detach().float().requires_grad_() for t in (q, keys, values)]
            out = _recomputed_fp32(*inputs, ctx.query_start, ctx.scale)
            grads = torch.autograd.grad(out, inputs, grad_out.float())
        grads = [g.to(t.dtype) if need else None for g, t, need in zip(grads, (q, keys, values), ctx.needs_input_grad)]
        return (*grads, None, None, None)


def consistent_autograd(q, keys, values, query_start: int, *, scale: float, block_kv: int):
    """`consistent` with a backward, for the trainer (same forward bits)."""
    return ConsistentAttention.apply(q, keys, values, query_start, scale, block_kv)
