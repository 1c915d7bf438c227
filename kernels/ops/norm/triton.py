"""RMSNorm (+ residual add) on CUDA, one Triton kernel per call, both contracts (norm.fast_fused, norm.consistent).

A program owns ROWS rows (ROWS and BLOCK follow D alone); a row's sum of squares runs in BLOCK
lanes (lane i adds i, i + BLOCK, ... in order) summed by tl.sum's tree: an order fixed by the row
length, so a row's bits follow neither its batch, tile slot nor phase. consistent rounds the
residual sum before the norm reads it and the output once from fp32 (norm.consistent's arithmetic;
CPU and CUDA bits are separate); fast_fused (vLLM's) reads the unrounded fp32 sum. Backward
recomputes the norm in fp32 torch ops from the saved h (C8's tolerance). Imports Triton.
"""
import torch
import triton
import triton.language as tl

from kernels.ops.autograd_use import records_graph
from kernels.ops.pdl import launch_options, wait_for_inputs

MAX_BLOCK = 4096
TILE_ELEMENTS = 2048  # a program holds max(1, TILE_ELEMENTS // BLOCK) rows: 16 rows of a 128-wide head


@triton.jit
def _norm_rows(x_ptr, res_ptr, w_ptr, out_ptr, h_ptr, block, num_rows, inner, stride_xa, stride_xb, stride_ra,
               stride_rb, width, eps, HAS_RESIDUAL: tl.constexpr, NORM_READS_ROUNDED: tl.constexpr,
               BLOCK: tl.constexpr, ROWS: tl.constexpr):
    """Rows block * ROWS .. + ROWS normed into out (contiguous rows of `width`); the kernel
    below and the fused q/k norm + RoPE (kernels/ops/qk_norm_rope_triton.py) both run it, so
    a row's tile, lanes and tree are the same in both."""
    rows = block.to(tl.int64) * ROWS + tl.arange(0, ROWS)
    is_row = (rows < num_rows)[:, None]
    x_rows = x_ptr + ((rows // inner) * stride_xa + (rows % inner) * stride_xb)[:, None]
    r_rows = res_ptr + ((rows // inner) * stride_ra + (rows % inner) * stride_rb)[:, None]
    offs = tl.arange(0, BLOCK)[None, :]
    acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
    for lo in range(0, width, BLOCK):
        mask = is_row & (lo + offs < width)
        h = tl.load(x_rows + lo + offs, mask=mask, other=0.0).to(tl.float32)
        if HAS_RESIDUAL:
            h = h + tl.load(r_rows + lo + offs, mask=mask, other=0.0).to(tl.float32)
            rounded = h.to(h_ptr.dtype.element_ty)
            tl.store(h_ptr + rows[:, None] * width + lo + offs, rounded, mask=mask)  # the residual stream
            if NORM_READS_ROUNDED:
                h = rounded.to(tl.float32)
        acc += h * h
    rstd = 1.0 / tl.sqrt_rn(tl.sum(acc, axis=1) / width + eps)[:, None]
    for lo in range(0, width, BLOCK):  # h again from the inputs (no read of this program's own stores)
        mask = is_row & (lo + offs < width)
        h = tl.load(x_rows + lo + offs, mask=mask, other=0.0).to(tl.float32)
        if HAS_RESIDUAL:
            h = h + tl.load(r_rows + lo + offs, mask=mask, other=0.0).to(tl.float32)
            if NORM_READS_ROUNDED:
                h = h.to(h_ptr.dtype.element_ty).to(tl.float32)
        w = tl.load(w_ptr + lo + offs, mask=lo + offs < width, other=0.0).to(tl.float32)
        tl.store(out_ptr + rows[:, None] * width + lo + offs, (h * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, h_ptr, num_rows, inner, stride_xa, stride_xb, stride_ra,
                     stride_rb, width, eps, HAS_RESIDUAL: tl.constexpr, NORM_READS_ROUNDED: tl.constexpr,
                     BLOCK: tl.constexpr, ROWS: tl.constexpr, PDL: tl.constexpr):
    wait_for_inputs(PDL)
    _norm_rows(x_ptr, res_ptr, w_ptr, out_ptr, h_ptr, tl.program_id(0), num_rows, inner, stride_xa, stride_xb,
               stride_ra, stride_rb, width, eps, HAS_RESIDUAL, NORM_READS_ROUNDED, BLOCK, ROWS)


def tile(width: int) -> tuple:
    """(BLOCK lanes, rows per program) for rows of `width`: the width's alone."""
    block = min(MAX_BLOCK, triton.next_power_of_2(width))
    return block, max(1, TILE_ELEMENTS // block)


def _rows(t):
    """(t as [A, B, D] with a unit last stride, A, B): a 2D or 3D tensor's rows in place."""
    if t.stride(-1) != 1:
        t = t.contiguous()
    if t.dim() == 2:
        t = t[:, None, :]
    elif t.dim() != 3:
        t = t.reshape(-1, t.shape[-1])[:, None, :]
    return t


def launch(x, w, eps: float, residual=None, norm_reads_rounded: bool = True, block: int = 0):
    """(y, h): y like x; h = x + residual rounded to x's dtype (None without a residual).
    block: the lanes a row is summed over; 0 = the width's own (a test or planted fault
    passes another: the lane count is the sum's order)."""
    if x.shape[-1] != w.shape[-1] or (residual is not None and residual.shape != x.shape):
        raise ValueError(f"rms_norm: x {tuple(x.shape)}, w {tuple(w.shape)}, residual "
                         f"{None if residual is None else tuple(residual.shape)}")
    width = x.shape[-1]
    rows = _rows(x)
    res = _rows(residual) if residual is not None else rows
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    h = torch.empty(x.shape, dtype=x.dtype, device=x.device) if residual is not None else None
    count = rows.shape[0] * rows.shape[1]
    natural, rows_per_program = tile(width)  # follows the width alone
    block = block or natural
    if count:
        _rms_norm_kernel[(triton.cdiv(count, rows_per_program),)](
            rows, res, w, out, h if h is not None else out, count, rows.shape[1], rows.stride(0), rows.stride(1),
            res.stride(0), res.stride(1), width, eps, HAS_RESIDUAL=residual is not None,
            NORM_READS_ROUNDED=norm_reads_rounded, BLOCK=block, ROWS=rows_per_program, num_warps=4,
            **launch_options(x.device))
    return out, h


def _recomputed_fp32(h, w, eps):
    h32 = h.float()
    return h32 * torch.rsqrt(h32.pow(2).mean(dim=-1, keepdim=True) + eps) * w.float()


class ConsistentRMSNorm(torch.autograd.Function):
    """Forward: the kernel (the engine's bits). Backward: fp32 torch ops from the saved h;
    h's gradient reaches x and the residual alike (h = x + residual)."""

    @staticmethod
    def forward(ctx, x, w, residual, eps):
        out, h = launch(x, w, eps, residual)
        ctx.save_for_backward(x if h is None else h, w)
        ctx.eps, ctx.has_residual = eps, residual is not None
        return out, h

    @staticmethod
    def backward(ctx, grad_out, grad_h):
        h, w = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [h.detach().float().requires_grad_(), w.detach().float().requires_grad_()]
            grad_in, grad_w = torch.autograd.grad(_recomputed_fp32(*leaves, ctx.eps), leaves, grad_out.float())
        if grad_h is not None:
            grad_in = grad_in + grad_h.float()
        grad_in = grad_in.to(h.dtype)
        return grad_in, grad_w.to(w.dtype), (grad_in if ctx.has_residual else None), None


def consistent(x, w, *, eps, residual=None):
    """norm.consistent on CUDA: (y, new residual stream or None)."""
    if records_graph(x, w, residual):
        return ConsistentRMSNorm.apply(x, w, residual, eps)
    return launch(x, w, eps, residual)


def fast_fused(x, w, *, eps, residual=None):
    """norm.fast_fused on CUDA (engine side, no gradient)."""
    return launch(x, w, eps, residual, norm_reads_rounded=False)
