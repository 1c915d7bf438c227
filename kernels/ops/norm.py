"""RMSNorm over the last dim: y = x * rsqrt(mean(x^2) + eps) * w, optionally after a
residual add (h = x + residual; y = norm(h); the new residual is h).

Consistency: each row is reduced on its own over the last dim (torch's row reduction over a
contiguous row does not depend on the number of rows: shown by tests/test_ops_invariance.py);
the residual sum is rounded to the activation dtype *before* the norm reads it, and the
output is rounded once from fp32. Reference: gates/reference/norm.py.
"""
import torch


def _normalize_fp32(h32, w, eps):
    variance = h32.pow(2).mean(dim=-1, keepdim=True)
    return h32 * torch.rsqrt(variance + eps) * w.float()


def fast_fused(x, w, *, eps, residual=None):
    """vLLM-style fused add+norm: the norm reads the *unrounded* fp32 sum, the residual
    stream keeps the rounded one; one rounding of the output."""
    if residual is None:
        return _normalize_fp32(x.float(), w, eps).to(x.dtype), None
    h32 = x.float() + residual.float()
    return _normalize_fp32(h32, w, eps).to(x.dtype), h32.to(x.dtype)


def fast_hf(x, w, *, eps, residual=None):
    """transformers-style: add in the activation dtype, normalise in fp32, round, then
    multiply by the weight in the activation dtype (two roundings)."""
    h = x if residual is None else x + residual
    h32 = h.float()
    variance = h32.pow(2).mean(dim=-1, keepdim=True)
    normed = (h32 * torch.rsqrt(variance + eps)).to(x.dtype)
    return w.to(x.dtype) * normed, (None if residual is None else h)


def consistent(x, w, *, eps, residual=None):
    """The residual sum rounded first, then the norm from fp32, one rounding."""
    h = x if residual is None else x + residual
    return _normalize_fp32(h.float(), w, eps).to(x.dtype), (None if residual is None else h)
