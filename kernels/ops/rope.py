"""Rotary position embedding, rotate-half form (Qwen3): x' = x*cos(p*f) + rot(x)*sin(p*f).

f_i = theta^(-2i/D). Consistency: the cos/sin table is computed once per (theta, D, max_position)
in float64 over every position, rounded to fp32 and *indexed* by position, so a token's angle never
depends on the other positions in the call; the rotation runs in fp32, rounded once.
Reference: gates/reference/rope.py.
"""
import functools

import torch

from kernels.ops.rope_rotation import rotate_half as _rotate_half
from kernels.ops.rope_rotation import rotated_fp32


@functools.lru_cache(maxsize=8)
def _fp32_table(theta: float, head_dim: int, max_position: int):
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(max_position, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)  # [P, D]
    return angles.cos().float(), angles.sin().float()


def fast(q, k, positions, *, theta, max_position):
    """Angles and cos/sin computed per call in fp32, rotation in the activation dtype (on
    CUDA without autograd, one Triton launch for q and k: kernels/ops/rope_triton.py)."""
    if q.device.type == "cuda" and not torch.is_grad_enabled():
        from kernels.ops import rope_triton
        return rope_triton.fast(q, k, positions, float(theta))
    head_dim = q.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=q.device) / head_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)[:, None, :]  # [M, 1, D]
    cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


@functools.lru_cache(maxsize=8)
def _device_table(theta: float, head_dim: int, max_position: int, device: torch.device):
    """The fp32 table copied once to `device` (the same bits: a copy). Made outside inference
    mode whoever asks first: the engine's first call runs in it, and the cached tables must
    stay usable by the trainer's autograd."""
    with torch.inference_mode(False):
        return tuple(t.to(device) for t in _fp32_table(theta, head_dim, max_position))


def consistent(q, k, positions, *, theta, max_position):
    """Table lookup by absolute position; fp32 rotation, one rounding. On a GPU the lookup
    stays on the device, with no host sync (a CUDA graph replays it): an out-of-range
    position is then the indexing kernel's device-side error, and the engine refuses such
    requests up front (Engine.add_request)."""
    if positions.device.type == "cpu" and positions.numel() and int(positions.max()) >= max_position:
        raise ValueError(f"position {int(positions.max())} >= max_position {max_position}")
    cos_table, sin_table = _device_table(float(theta), q.shape[-1], int(max_position), q.device)
    positions = positions.to(q.device)
    if q.device.type == "cuda":  # one Triton launch for q and k, both runtimes
        from kernels.ops import rope_triton
        return rope_triton.consistent(q, k, positions, cos_table, sin_table)
    cos = cos_table[positions][:, None, :]
    sin = sin_table[positions][:, None, :]

    def rotate(x):
        return rotated_fp32(x.float(), cos, sin).to(x.dtype)

    return rotate(q), rotate(k)
