"""rope_interleaved.consistent: cos/sin from one fp32 table per (theta, rope_dim, max_position),
computed in float64 and indexed by absolute position; the rotation in fp32, rounded once."""
import functools

import torch

from kernels.ops.rope_interleaved.forms import rotated


@functools.lru_cache(maxsize=16)
def _fp32_table(theta: float, rope_dim: int, max_position: int):
    inv_freq = theta ** (-torch.arange(0, rope_dim, 2, dtype=torch.float64) / rope_dim)
    angles = torch.arange(max_position, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().float(), angles.sin().float()


@functools.lru_cache(maxsize=16)
def _device_table(theta: float, rope_dim: int, max_position: int, device: torch.device):
    """The table copied once to `device`, outside inference mode (the trainer reuses it)."""
    with torch.inference_mode(False):
        return tuple(t.to(device) for t in _fp32_table(theta, rope_dim, max_position))


def consistent(x, positions, *, theta, max_position, rope_dim, inverse=False):
    """x [M, ..., D] rotated at positions [M] (by -p when `inverse`), in x's dtype."""
    if positions.device.type == "cpu" and positions.numel() and int(positions.max()) >= max_position:
        raise ValueError(f"position {int(positions.max())} >= max_position {max_position}")
    cos_table, sin_table = _device_table(float(theta), int(rope_dim), int(max_position), x.device)
    positions = positions.to(x.device)
    shape = (positions.shape[0],) + (1,) * (x.dim() - 2) + (rope_dim // 2,)
    cos, sin = cos_table[positions].reshape(shape), sin_table[positions].reshape(shape)
    return rotated(x.float(), cos, -sin if inverse else sin, rope_dim).to(x.dtype)
