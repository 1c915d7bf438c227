"""The rotate-half rotation in torch ops: x' = x*cos + rot(x)*sin with rot(x) = [-x2, x1]. The
consistent CPU path (kernels/ops/rope/consistent.py), the fast one (fast.py) and the CUDA
backward's recompute (kernels/ops/rope/triton.py) rotate with it, so none imports another.
"""
import torch


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def rotated_fp32(x32, cos, sin):
    """The consistent rotation in fp32, unrounded (the CPU path; the CUDA backward's recompute)."""
    return x32 * cos + rotate_half(x32) * sin
