"""RMSNorm over the last dim: y = x * rsqrt(mean(x^2) + eps) * w, optionally after a residual add.

With a residual, h = x + residual is normed and returned as the new residual. Consistency: a row's
sum of squares is reduced in an order fixed by its length (reduction.py; torch alone splits a
lone row of >= 32768 elements over threads); the residual sum is rounded to the activation dtype
before the norm reads it, the output once from fp32. Reference: gates/reference/norm.py.
"""
import torch

from kernels.ops.reduction import row_sum


def _normalize_fp32(h32, w, eps):
    variance = row_sum(h32 * h32) / h32.shape[-1]
    return h32 * torch.rsqrt(variance + eps) * w.float()


def fast_fused(x, w, *, eps, residual=None):
    """vLLM-style fused add+norm: the norm reads the *unrounded* fp32 sum, the residual
    stream keeps the rounded one; one rounding of the output. On CUDA without autograd (the
    engine), one fused Triton kernel (kernels/ops/norm_triton.py), as engines run it."""
    if x.device.type == "cuda" and not torch.is_grad_enabled():
        from kernels.ops import norm_triton
        return norm_triton.fast_fused(x, w, eps=eps, residual=residual)
    h32 = x.float() if residual is None else x.float() + residual.float()
    variance = h32.pow(2).mean(dim=-1, keepdim=True)
    normed = (h32 * torch.rsqrt(variance + eps) * w.float()).to(x.dtype)
    return normed, (None if residual is None else h32.to(x.dtype))


def fast_hf(x, w, *, eps, residual=None):
    """transformers-style: add in the activation dtype, normalise in fp32, round, then
    multiply by the weight in the activation dtype (two roundings)."""
    h = x if residual is None else x + residual
    h32 = h.float()
    variance = h32.pow(2).mean(dim=-1, keepdim=True)
    normed = (h32 * torch.rsqrt(variance + eps)).to(x.dtype)
    return w.to(x.dtype) * normed, (None if residual is None else h)


def consistent(x, w, *, eps, residual=None):
    """The residual sum rounded first, then the norm from fp32, one rounding. On CUDA one
    Triton kernel per call for both runtimes (kernels/ops/norm_triton.py)."""
    if x.device.type == "cuda":
        from kernels.ops import norm_triton
        return norm_triton.consistent(x, w, eps=eps, residual=residual)
    h = x if residual is None else x + residual
    return _normalize_fp32(h.float(), w, eps).to(x.dtype), (None if residual is None else h)
