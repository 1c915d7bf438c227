"""The consistent conv's taps in torch ops: the window (the K-1 held rows, then the segment's)
and the K taps accumulated one by one in fp32, then SiLU by the position-independent sigmoid.
The CPU path (kernels/ops/ssm_conv.py) and the CUDA backward's recompute
(kernels/ops/ssm_conv_triton.py) both run it, so neither imports the other.
"""
import torch

from kernels.ops.activation import position_independent_sigmoid


def window_rows(conv, xbc):
    """The conv window from the K-1 held rows `conv` and the segment's rows."""
    return torch.cat([conv.to(xbc.dtype), xbc])


def consistent_taps(window, weight, bias, num_rows):
    """The consistent conv + SiLU of a window's rows, in fp32 (unrounded); a window [K-1+T,
    ..., C] with more dims between gives each of them the same terms."""
    acc = bias.float().expand(num_rows, *window.shape[1:-1], -1)
    for k in range(weight.shape[-1]):
        acc = acc + weight[:, k].float() * window[k:k + num_rows].float()
    return acc * position_independent_sigmoid(acc)
