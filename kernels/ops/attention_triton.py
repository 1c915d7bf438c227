"""Causal GQA attention on CUDA through Triton, the consistent kernel (the CUDA backend of
kernels/ops/attention.py's `consistent`): out_t = softmax(q_t . K[:start+t+1]^T * scale) V
for a segment's query rows at absolute positions start .. start+T-1 over its whole context.

Math: rows are (token, query head) pairs grouped by KV head, as on the CPU (`_grouped_rows`);
each program owns BLOCK_M = 16 of them (decode pads) and walks the keys in blocks of
`block_kv` from absolute position 0 with an fp32 online softmax: s = (q . K^T) * scale,
causal mask by position, m' = max(m, rowmax s), alpha = exp(m - m'), p = exp(s - m'),
l = l*alpha + rowsum p, acc = acc*alpha + p @ V; out = acc / l rounded once to q's dtype.
Dots accumulate in fp32: fp32 inputs use input_precision="ieee" (no TF32) for both dots;
half inputs (bf16/fp16) cast p to the value dtype before p @ V, as FlashAttention does.
Consistency: a row's arithmetic is fixed by its own query, its position and the fixed walk.
The walk stops at the last key any row of the tile needs; for a row needing fewer keys the
extra blocks are fully masked and leave m, l, acc bit for bit unchanged (alpha is 1 exactly:
it is set to 1 when m' == m rather than trusting exp(0); p = exp(-inf) = 0; acc + 0). So
decode (T = 1), prefill, chunked prefill at any split and the trainer's full pass give the
same bits. BLOCK_M, the walk and the launch config (LAUNCH_TABLE) follow only D, dtype and
block_kv, never T, the context length C or the batch. Whether an MMA row's bits are
independent of its slot in the tile is the same empirical claim linear_triton.py makes;
benchmarks/gpu_kernel_check.py checks it on the device. Reference: gates/reference/attention.py.
Imports Triton, so only CUDA machines (or TRITON_INTERPRET=1 tests) import this file.
"""
import torch
import triton
import triton.language as tl

BLOCK_M = 16  # query rows per program, whatever T is (decode pads)
# (head_dim, dtype) -> (num_warps, num_stages); any other pair uses DEFAULT_LAUNCH. Never keyed by T or C.
LAUNCH_TABLE = {(128, torch.bfloat16): (4, 2), (128, torch.float16): (4, 2), (64, torch.bfloat16): (4, 2)}
DEFAULT_LAUNCH = (4, 2)


@triton.jit(do_not_specialize=["query_start", "num_tokens", "context"])
def _attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, starts_ptr, query_start, num_tokens, context, scale,
                      stride_qb, stride_qt, stride_qh, stride_kb, stride_kc, stride_kh,
                      stride_vb, stride_vc, stride_vh, stride_ob, stride_ot, stride_oh,
                      GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_KV: tl.constexpr, HAS_STARTS: tl.constexpr,
                      IS_FP32: tl.constexpr):
    tile, kv_head, seq = tl.program_id(0), tl.program_id(1), tl.program_id(2).to(tl.int64)
    if HAS_STARTS:  # batched: one start per sequence
        query_start = tl.load(starts_ptr + seq)
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)  # row = token * GROUP + member of the group
    is_row = rows < num_tokens * GROUP
    token, head = rows // GROUP, kv_head * GROUP + rows % GROUP
    query_pos = query_start + token  # absolute position of each row's token
    offs_d = tl.arange(0, BLOCK_D)
    is_d = offs_d < HEAD_DIM
    q = tl.load(q_ptr + seq * stride_qb + token[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
                mask=is_row[:, None] & is_d[None, :], other=0.0)  # [BLOCK_M, BLOCK_D]
    # last key any (real) row of the tile needs, + 1; keys past it are never loaded
    last_token = (tl.minimum(tile * BLOCK_M + BLOCK_M, num_tokens * GROUP) - 1) // GROUP
    hi = tl.minimum(query_start + last_token + 1, context)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    offs_kv = tl.arange(0, BLOCK_KV)
    k_base = k_ptr + seq * stride_kb + kv_head * stride_kh
    v_base = v_ptr + seq * stride_vb + kv_head * stride_vh
    for lo in range(0, hi, BLOCK_KV):  # from absolute position 0, whatever the phase
        key_pos = lo + offs_kv
        is_key = key_pos < hi
        k = tl.load(k_base + key_pos[None, :] * stride_kc + offs_d[:, None],
                    mask=is_key[None, :] & is_d[:, None], other=0.0)  # [BLOCK_D, BLOCK_KV]
        v = tl.load(v_base + key_pos[:, None] * stride_vc + offs_d[None, :],
                    mask=is_key[:, None] & is_d[None, :], other=0.0)  # [BLOCK_KV, BLOCK_D]
        if IS_FP32:
            s = tl.dot(q, k, input_precision="ieee") * scale
        else:
            s = tl.dot(q, k) * scale
        s = tl.where(key_pos[None, :] > query_pos[:, None], float("-inf"), s)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.where(m_new == m_i, 1.0, tl.exp(m_i - m_new))
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if IS_FP32:
            pv = tl.dot(p, v, input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + seq * stride_ob + token[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=is_row[:, None] & is_d[None, :])


def _check(q, keys, values):
    if not (q.dtype == keys.dtype == values.dtype) or q.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"attention: q, keys, values need one dtype of fp32/fp16/bf16, got "
                         f"{q.dtype}, {keys.dtype}, {values.dtype}")
    if q.shape[-2] % keys.shape[-2] or keys.shape != values.shape or q.shape[-1] != keys.shape[-1]:
        raise ValueError(f"attention: shapes q {tuple(q.shape)}, keys {tuple(keys.shape)}, "
                         f"values {tuple(values.shape)} (Hq must be a multiple of Hkv)")
    return [t if t.stride(-1) == 1 else t.contiguous() for t in (q, keys, values)]


def _launch(q, keys, values, starts, query_start, *, scale, block_kv):
    """q [B, T, Hq, D]; keys, values [B, C, Hkv, D]; starts [B] int64 tensor or None."""
    q, keys, values = _check(q, keys, values)
    batch, num_tokens, num_q_heads, head_dim = q.shape
    context, num_kv_heads = keys.shape[1], keys.shape[2]
    if block_kv < 16 or block_kv & (block_kv - 1):
        raise ValueError(f"block_kv {block_kv} must be a power of two >= 16")
    out = torch.empty_like(q)
    group = num_q_heads // num_kv_heads
    grid = (triton.cdiv(num_tokens * group, BLOCK_M), num_kv_heads, batch)
    if out.numel() == 0:
        return out
    num_warps, num_stages = LAUNCH_TABLE.get((head_dim, q.dtype), DEFAULT_LAUNCH)
    _attention_kernel[grid](
        q, keys, values, out, starts if starts is not None else q, query_start, num_tokens, context, scale,
        *q.stride()[:3], *keys.stride()[:3], *values.stride()[:3], *out.stride()[:3],
        GROUP=group, HEAD_DIM=head_dim, BLOCK_D=max(16, triton.next_power_of_2(head_dim)), BLOCK_M=BLOCK_M,
        BLOCK_KV=block_kv, HAS_STARTS=starts is not None, IS_FP32=q.dtype == torch.float32,
        num_warps=num_warps, num_stages=num_stages)
    return out


def consistent(q, keys, values, query_start: int, *, scale: float, block_kv: int):
    """q [T, Hq, D] at absolute positions query_start .. query_start+T-1; keys, values
    [C, Hkv, D], the whole context from position 0 (C >= query_start + T) -> [T, Hq, D]."""
    if keys.shape[0] < query_start + q.shape[0]:
        raise ValueError(f"context {keys.shape[0]} < query_start {query_start} + T {q.shape[0]}")
    return _launch(q[None], keys[None], values[None], None, query_start, scale=scale, block_kv=block_kv)[0]


def consistent_batched(q, keys, values, query_starts, *, scale: float, block_kv: int):
    """B segments of T tokens each in one launch (e.g. a decode step): q [B, T, Hq, D];
    keys, values [B, C, Hkv, D] padded to a common C; query_starts [B] int64 on q's device
    (sequence b's context is keys[b, :query_starts[b] + T], not checked here). Each row
    gives the same bits as `consistent` on that sequence alone."""
    return _launch(q, keys, values, query_starts, 0, scale=scale, block_kv=block_kv)


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
