"""Float64 reference of RMSNorm with an optional residual add:
h = x + residual (or x); y = h / sqrt(mean(h^2) + eps) * w; the new residual is h.
"""
import torch


def rmsnorm(x, w, *, eps, residual=None):
    """(y, h) in float64; h is None when there is no residual, as in kernels.ops.norm."""
    h = x.double() if residual is None else x.double() + residual.double()
    y = h / torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps) * w.double()
    return y, (None if residual is None else h)
