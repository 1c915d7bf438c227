"""The interleaved rotation both contracts use: pairs of the trailing rope_dim channels."""
import torch


def rotated(x, cos, sin, rope_dim: int):
    """x [..., D]: its last rope_dim channels as pairs rotated by cos, sin [..., rope_dim / 2]
    (broadcast over x's middle dims), in x's dtype; the leading channels unchanged."""
    nope, rope = x[..., :-rope_dim], x[..., -rope_dim:]
    even, odd = rope[..., 0::2], rope[..., 1::2]
    turned = torch.stack([even * cos - odd * sin, odd * cos + even * sin], dim=-1).flatten(-2)
    return torch.cat([nope, turned], dim=-1)
