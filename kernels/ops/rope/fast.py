"""rope.fast: angles and cos/sin computed per call in fp32, the rotation in the activation
dtype, as engines run it."""
import torch

from kernels.ops.rope.forms import rotate_half as _rotate_half


def fast(q, k, positions, *, theta, max_position):
    """Angles and cos/sin computed per call in fp32, rotation in the activation dtype (on
    CUDA without autograd, one Triton launch for q and k: kernels/ops/rope/triton.py)."""
    if q.device.type == "cuda" and not torch.is_grad_enabled():
        import kernels.ops.rope.triton as rope_triton
        return rope_triton.fast(q, k, positions, float(theta))
    head_dim = q.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=q.device) / head_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)[:, None, :]  # [M, 1, D]
    cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
