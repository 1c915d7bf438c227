"""gated_norm.fast: transformers' MambaRMSNormGated, the scan output rounded to the activation
dtype first, the weight multiplied after a second rounding; and its Qwen3_5MoeRMSNormGated."""
import torch
import torch.nn.functional as F


def fast(y, z, w, *, eps, group_size):
    """transformers-style, in the activation dtype of z."""
    dtype = z.dtype
    h = y.to(dtype).float() * F.silu(z.float())
    grouped = h.reshape(*h.shape[:-1], -1, group_size)
    normed = grouped * torch.rsqrt(grouped.pow(2).mean(dim=-1, keepdim=True) + eps)
    return w * normed.reshape(h.shape).to(dtype)


def gate_after(y, z, w, *, eps):
    """transformers' Qwen3_5MoeRMSNormGated on the delta rule's output rounded to z's dtype."""
    dtype = z.dtype
    y32 = y.to(dtype).float()
    normed = y32 * torch.rsqrt(y32.pow(2).mean(dim=-1, keepdim=True) + eps)
    return ((w * normed.to(dtype)) * F.silu(z.float())).to(dtype)
