"""rope.consistent: cos/sin from one fp32 table per (theta, D, max_position), computed in
float64 and indexed by absolute position; the rotation in fp32, rounded once; on CUDA one
Triton launch for q and k (triton.py).
"""
import functools

import torch

from kernels.ops.rope.forms import rotated_fp32


@functools.lru_cache(maxsize=8)
def _fp32_table(theta: float, head_dim: int, max_position: int):
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(max_position, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)  # [P, D]
    return angles.cos().float(), angles.sin().float()


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
        import kernels.ops.rope.triton as rope_triton
        return rope_triton.consistent(q, k, positions, cos_table, sin_table)
    cos = cos_table[positions][:, None, :]
    sin = sin_table[positions][:, None, :]

    def rotate(x):
        return rotated_fp32(x.float(), cos, sin).to(x.dtype)

    return rotate(q), rotate(k)
