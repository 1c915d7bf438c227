"""rope_interleaved.fast: angles per call in fp32, cos/sin rounded to the activation dtype and the
rotation in it, as the reference implementation runs it."""
import torch


def fast(x, positions, *, theta, max_position, rope_dim, inverse=False):
    del max_position  # angles are computed for the positions asked
    inv_freq = 1.0 / (theta ** (torch.arange(0, rope_dim, 2, dtype=torch.float32, device=x.device) / rope_dim))
    angles = positions.to(x.device).float()[:, None] * inv_freq[None, :]
    shape = (positions.shape[0],) + (1,) * (x.dim() - 2) + (rope_dim // 2,)
    cos, sin = angles.cos().to(x.dtype).reshape(shape), angles.sin().to(x.dtype).reshape(shape)
    nope, rope = x[..., :-rope_dim], x[..., -rope_dim:]
    turned = (rope.float() * cos.repeat_interleave(2, -1) + _rotate_pairs(rope).float()
              * (-sin if inverse else sin).repeat_interleave(2, -1)).to(x.dtype)
    return torch.cat([nope, turned], dim=-1)


def _rotate_pairs(x):
    """(x_2i, x_2i+1) -> (-x_2i+1, x_2i)."""
    return torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
