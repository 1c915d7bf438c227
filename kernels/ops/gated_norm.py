"""Mamba-2's gated RMSNorm per group: h = y * silu(z); out = h * rsqrt(mean_g(h^2) + eps) * w.

The mean runs over each group of `group_size` channels. Consistency: fp32 throughout from the
scan's fp32 output, the position-independent sigmoid, a fixed-order group sum, one rounding. The
fast variant is transformers' MambaRMSNormGated: the scan output rounded to the activation dtype
first, the weight multiplied after a second rounding. Reference: gates/reference/ssm.py.
"""
import torch
import torch.nn.functional as F

from kernels.ops.activation import position_independent_sigmoid
from kernels.ops.reduction import row_sum


def fast(y, z, w, *, eps, group_size):
    """transformers-style, in the activation dtype of z."""
    dtype = z.dtype
    h = y.to(dtype).float() * F.silu(z.float())
    grouped = h.reshape(*h.shape[:-1], -1, group_size)
    normed = grouped * torch.rsqrt(grouped.pow(2).mean(dim=-1, keepdim=True) + eps)
    return w * normed.reshape(h.shape).to(dtype)


def consistent(y, z, w, *, eps, group_size):
    """fp32 from the scan output to the end; one rounding."""
    z32 = z.float()
    h = y.float() * (z32 * position_independent_sigmoid(z32))
    grouped = h.reshape(*h.shape[:-1], -1, group_size)
    variance = row_sum(grouped * grouped) / group_size
    normed = grouped * torch.rsqrt(variance + eps)
    return (normed.reshape(h.shape) * w.float()).to(z.dtype)
