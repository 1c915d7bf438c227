"""Rotary embedding on CUDA as one Triton launch for q and one for k (the CUDA backend of
kernels/ops/rope.py), rotate-half form: out = x * cos + rotate_half(x) * sin per (token, head).

consistent: cos/sin looked up by absolute position in the fp32 table rope.py builds once in
  float64, the rotation in fp32, rounded once; a row reads only its own position and its own
  head, so its bits do not depend on the batch or the phase.
fast: angles computed in the kernel from the position in fp32 (inv_freq = theta^(-2i/D)),
  cos/sin and every product rounded to the activation dtype, as engines' fused kernels do.
The consistent trainer's backward recomputes the rotation in fp32 torch ops (a rotation's
gradient is the inverse rotation of the incoming gradient).
Imports Triton, so only CUDA machines (or TRITON_INTERPRET=1 tests) import this file.
"""
import math

import torch
import triton
import triton.language as tl

from kernels.ops.autograd_use import records_graph
from kernels.ops.rope import rotated_fp32


@triton.jit
def _rope_kernel(x_ptr, out_ptr, pos_ptr, cos_ptr, sin_ptr, heads, stride_xt, stride_xh, log2_theta,
                 HALF: tl.constexpr, BLOCK: tl.constexpr, FROM_TABLE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # row = token * heads + head
    token, head = row // heads, row % heads
    position = tl.load(pos_ptr + token)
    offs = tl.arange(0, BLOCK)
    mask = offs < HALF
    x_row = x_ptr + token * stride_xt + head * stride_xh
    x1 = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_row + HALF + offs, mask=mask, other=0.0).to(tl.float32)
    out_row = out_ptr + row * 2 * HALF
    if FROM_TABLE:  # the table's row holds [angles, angles]: the first half serves both
        cos = tl.load(cos_ptr + position * 2 * HALF + offs, mask=mask, other=0.0)
        sin = tl.load(sin_ptr + position * 2 * HALF + offs, mask=mask, other=0.0)
        tl.store(out_row + offs, (x1 * cos - x2 * sin).to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(out_row + HALF + offs, (x2 * cos + x1 * sin).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        dtype = out_ptr.dtype.element_ty
        inv_freq = tl.exp2(-(2.0 * offs.to(tl.float32) / (2 * HALF)) * log2_theta)
        angle = position.to(tl.float32) * inv_freq
        cos = tl.cos(angle).to(dtype).to(tl.float32)
        sin = tl.sin(angle).to(dtype).to(tl.float32)
        x1, x2 = x1.to(dtype).to(tl.float32), x2.to(dtype).to(tl.float32)
        first = ((x1 * cos).to(dtype).to(tl.float32) - (x2 * sin).to(dtype).to(tl.float32)).to(dtype)
        second = ((x2 * cos).to(dtype).to(tl.float32) + (x1 * sin).to(dtype).to(tl.float32)).to(dtype)
        tl.store(out_row + offs, first, mask=mask)
        tl.store(out_row + HALF + offs, second, mask=mask)


def launch(x, positions, *, cos_table=None, sin_table=None, theta: float = 0.0):
    """x [T, H, D] (any strides with a unit last one) rotated by positions [T] -> contiguous
    [T, H, D]: from the fp32 tables when given (consistent), else from theta (fast)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    num_tokens, heads, head_dim = x.shape
    if head_dim % 2 or positions.shape != (num_tokens,):
        raise ValueError(f"rope: x {tuple(x.shape)}, positions {tuple(positions.shape)}")
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    from_table = cos_table is not None
    if out.numel():
        _rope_kernel[(num_tokens * heads,)](
            x, out, positions, cos_table if from_table else x, sin_table if from_table else x, heads,
            x.stride(0), x.stride(1), math.log2(theta) if theta > 0 else 0.0, HALF=head_dim // 2,
            BLOCK=triton.next_power_of_2(head_dim // 2), FROM_TABLE=from_table, num_warps=1)
    return out


class ConsistentRope(torch.autograd.Function):
    """Forward: the table kernel. Backward: the fp32 rotation differentiated in torch ops."""

    @staticmethod
    def forward(ctx, x, positions, cos_table, sin_table):
        ctx.save_for_backward(x, positions)
        ctx.tables = (cos_table, sin_table)  # constants, not saved for autograd
        return launch(x, positions, cos_table=cos_table, sin_table=sin_table)

    @staticmethod
    def backward(ctx, grad):
        x, positions = ctx.saved_tensors
        cos, sin = (table[positions][:, None, :] for table in ctx.tables)
        with torch.enable_grad():
            leaf = x.detach().float().requires_grad_()
            (grad_x,) = torch.autograd.grad(rotated_fp32(leaf, cos, sin), [leaf], grad.float())
        return grad_x.to(x.dtype), None, None, None


def consistent(q, k, positions, cos_table, sin_table):
    if records_graph(q, k):
        return (ConsistentRope.apply(q, positions, cos_table, sin_table),
                ConsistentRope.apply(k, positions, cos_table, sin_table))
    return (launch(q, positions, cos_table=cos_table, sin_table=sin_table),
            launch(k, positions, cos_table=cos_table, sin_table=sin_table))


def fast(q, k, positions, theta: float):
    return launch(q, positions, theta=theta), launch(k, positions, theta=theta)
