"""norm's fast variants: vLLM's fused add + norm (the norm reads the unrounded fp32 sum) and
transformers' (add in the activation dtype, two roundings)."""
import torch


def fast_fused(x, w, *, eps, residual=None):
    """vLLM-style fused add+norm: the norm reads the *unrounded* fp32 sum, the residual
    stream keeps the rounded one; one rounding of the output. On CUDA without autograd (the
    engine), one fused Triton kernel (kernels/ops/norm/triton.py), as engines run it."""
    if x.device.type == "cuda" and not torch.is_grad_enabled():
        import kernels.ops.norm.triton as norm_triton
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
