"""The conv's torch forms: the window (the K-1 held rows, then the segment's), kept and moved on
by every variant (fast.py, consistent.py), and the consistent taps accumulated one by one in
fp32, then SiLU by the position-independent sigmoid: the consistent CPU path and the CUDA
backward's recompute (kernels/ops/ssm_conv/triton.py) both run them, so neither imports the other.
"""
import torch

from kernels.ops.activation.consistent import position_independent_sigmoid


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


def _window(xbc, state):
    """[K-1+T, C]: the conv state's K-1 rows, then the segment's rows."""
    return window_rows(state.conv, xbc)


def _decode_window(xbc, segments, store):
    """[B, K, C]: each sequence's K-1 held rows (the pooled store's) and its one new row; the
    store moves on by the row, in place."""
    slots = store.decode_slots(segments)
    window = torch.cat([store.conv[slots].to(xbc.dtype), xbc[:, None]], dim=1)
    store.conv[slots] = window[:, 1:]
    return window


def _keep_tail(state, window, kernel_size):
    state.conv = window[window.shape[0] - (kernel_size - 1):].detach()
