"""Rotary embedding on CUDA, q and k in one Triton launch (rope.fast, rope.consistent on CUDA), rotate-half form.

consistent: cos/sin looked up by absolute position in consistent.py's fp32 table, the rotation in fp32,
rounded once; a row reads only its own position and head, so its bits follow neither batch nor
phase. fast: angles from the position in fp32, cos/sin and every product rounded to the activation
dtype, as engines' fused kernels do. A program rotates ROWS rows: elementwise, the tile moves no
bit. The consistent backward rotates the gradient back in fp32 torch ops.
"""
import math

import torch
import triton
import triton.language as tl

from kernels.ops.autograd_use import records_graph
from kernels.ops.rope.forms import rotated_fp32

ROWS = 16  # (token, head) rows per program


@triton.jit
def _rotate_rows(x_ptr, out_ptr, pos_ptr, cos_ptr, sin_ptr, block, num_rows, heads, stride_xt, stride_xh,
                 log2_theta, HALF: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr,
                 FROM_TABLE: tl.constexpr):
    rows = block * ROWS + tl.arange(0, ROWS).to(tl.int64)  # row = token * heads + head
    is_row = rows < num_rows
    token, head = rows // heads, rows % heads
    position = tl.load(pos_ptr + token, mask=is_row, other=0)
    offs = tl.arange(0, BLOCK)
    mask = is_row[:, None] & (offs < HALF)[None, :]
    x_row = x_ptr + (token * stride_xt + head * stride_xh)[:, None] + offs[None, :]
    x1 = tl.load(x_row, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_row + HALF, mask=mask, other=0.0).to(tl.float32)
    out_row = out_ptr + (rows * 2 * HALF)[:, None] + offs[None, :]
    if FROM_TABLE:  # the table's row holds [angles, angles]: the first half serves both
        table_at = (position * 2 * HALF)[:, None] + offs[None, :]
        cos = tl.load(cos_ptr + table_at, mask=mask, other=0.0)
        sin = tl.load(sin_ptr + table_at, mask=mask, other=0.0)
        tl.store(out_row, (x1 * cos - x2 * sin).to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(out_row + HALF, (x2 * cos + x1 * sin).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        dtype = out_ptr.dtype.element_ty
        inv_freq = tl.exp2(-(2.0 * offs.to(tl.float32) / (2 * HALF)) * log2_theta)
        angle = position.to(tl.float32)[:, None] * inv_freq[None, :]
        cos = tl.cos(angle).to(dtype).to(tl.float32)
        sin = tl.sin(angle).to(dtype).to(tl.float32)
        x1, x2 = x1.to(dtype).to(tl.float32), x2.to(dtype).to(tl.float32)
        first = ((x1 * cos).to(dtype).to(tl.float32) - (x2 * sin).to(dtype).to(tl.float32)).to(dtype)
        second = ((x2 * cos).to(dtype).to(tl.float32) + (x1 * sin).to(dtype).to(tl.float32)).to(dtype)
        tl.store(out_row, first, mask=mask)
        tl.store(out_row + HALF, second, mask=mask)


@triton.jit
def _rope_kernel(q_ptr, k_ptr, q_out_ptr, k_out_ptr, pos_ptr, cos_ptr, sin_ptr, q_rows, k_rows, q_heads, k_heads,
                 stride_qt, stride_qh, stride_kt, stride_kh, log2_theta,
                 HALF: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, FROM_TABLE: tl.constexpr):
    program = tl.program_id(0)
    q_programs = tl.cdiv(q_rows, ROWS)
    if program < q_programs:
        _rotate_rows(q_ptr, q_out_ptr, pos_ptr, cos_ptr, sin_ptr, program, q_rows, q_heads, stride_qt, stride_qh,
                     log2_theta, HALF, BLOCK, ROWS, FROM_TABLE)
    else:
        _rotate_rows(k_ptr, k_out_ptr, pos_ptr, cos_ptr, sin_ptr, program - q_programs, k_rows, k_heads,
                     stride_kt, stride_kh, log2_theta, HALF, BLOCK, ROWS, FROM_TABLE)


def _unit_last(x):
    return x if x.stride(-1) == 1 else x.contiguous()


def launch(q, k, positions, *, cos_table=None, sin_table=None, theta: float = 0.0):
    """q [T, Hq, D] and k [T, Hk, D] (any strides with a unit last one) rotated by positions
    [T] -> contiguous (q', k'), one launch: from the fp32 tables when given (consistent),
    else from theta (fast)."""
    q, k = _unit_last(q), _unit_last(k)
    num_tokens, q_heads, head_dim = q.shape
    if head_dim % 2 or positions.shape != (num_tokens,) or k.shape[0] != num_tokens or k.shape[2] != head_dim:
        raise ValueError(f"rope: q {tuple(q.shape)}, k {tuple(k.shape)}, positions {tuple(positions.shape)}")
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    q_rows, k_rows = num_tokens * q_heads, num_tokens * k.shape[1]
    from_table = cos_table is not None
    programs = triton.cdiv(q_rows, ROWS) + triton.cdiv(k_rows, ROWS)
    if programs:
        _rope_kernel[(programs,)](
            q, k, q_out, k_out, positions, cos_table if from_table else q, sin_table if from_table else q,
            q_rows, k_rows, q_heads, max(1, k.shape[1]), q.stride(0), q.stride(1), k.stride(0), k.stride(1),
            math.log2(theta) if theta > 0 else 0.0, HALF=head_dim // 2,
            BLOCK=triton.next_power_of_2(head_dim // 2), ROWS=ROWS, FROM_TABLE=from_table, num_warps=4)
    return q_out, k_out


class ConsistentRope(torch.autograd.Function):
    """Forward: the table kernel on q and k. Backward: the fp32 rotation differentiated in
    torch ops, for each of them."""

    @staticmethod
    def forward(ctx, q, k, positions, cos_table, sin_table):
        ctx.save_for_backward(q, k, positions)
        ctx.tables = (cos_table, sin_table)  # constants, not saved for autograd
        return launch(q, k, positions, cos_table=cos_table, sin_table=sin_table)

    @staticmethod
    def backward(ctx, grad_q, grad_k):
        q, k, positions = ctx.saved_tensors
        cos, sin = (table[positions][:, None, :] for table in ctx.tables)
        grads = []
        for x, grad in ((q, grad_q), (k, grad_k)):
            with torch.enable_grad():
                leaf = x.detach().float().requires_grad_()
                (grad_x,) = torch.autograd.grad(rotated_fp32(leaf, cos, sin), [leaf], grad.float())
            grads.append(grad_x.to(x.dtype))
        return (*grads, None, None, None)


def consistent(q, k, positions, cos_table, sin_table):
    if records_graph(q, k):
        return ConsistentRope.apply(q, k, positions, cos_table, sin_table)
    return launch(q, k, positions, cos_table=cos_table, sin_table=sin_table)


def fast(q, k, positions, theta: float):
    return launch(q, k, positions, theta=theta)
