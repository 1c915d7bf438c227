"""Float64 reference of rotary position embedding, rotate-half form (Qwen3):
x' = x * cos(p * f) + rotate_half(x) * sin(p * f), f_i = theta^(-2i/D) for i < D/2,
each frequency used for both halves; rotate_half([a, b]) = [-b, a].
"""
import torch


def rope(x, positions, *, theta):
    """x [M, H, D] rotated by the angle of its row's position, positions [M]; float64."""
    head_dim = x.shape[-1]
    inv_freq = float(theta) ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions.double()[:, None] * inv_freq[None, :]  # [M, D/2]
    angles = torch.cat([angles, angles], dim=-1)[:, None, :]  # [M, 1, D]
    x64 = x.double()
    first, second = x64.chunk(2, dim=-1)
    rotated = torch.cat([-second, first], dim=-1)
    return x64 * angles.cos() + rotated * angles.sin()


def rope_interleaved(x, positions, *, theta, rope_dim, inverse=False):
    """x [M, ..., D]: pairs (x_2i, x_2i+1) of the last rope_dim channels rotated by p f_i (by -p when
    `inverse`), f_i = theta^(-2i/rope_dim); the leading channels unchanged; float64."""
    inv_freq = float(theta) ** (-torch.arange(0, rope_dim, 2, dtype=torch.float64) / rope_dim)
    angles = positions.double()[:, None] * inv_freq[None, :] * (-1 if inverse else 1)
    shape = (positions.shape[0],) + (1,) * (x.dim() - 2) + (rope_dim // 2,)
    cos, sin = angles.cos().reshape(shape), angles.sin().reshape(shape)
    x64 = x.double()
    even, odd = x64[..., -rope_dim::2], x64[..., -rope_dim + 1::2]
    turned = torch.stack([even * cos - odd * sin, odd * cos + even * sin], dim=-1).flatten(-2)
    return torch.cat([x64[..., :-rope_dim], turned], dim=-1)
