"""ssm_conv's fast variants, as engines run them: F.conv1d over the window for prefill, and a
window-sum update for decode (another order), SiLU in the activation dtype.
"""
import torch
import torch.nn.functional as F

from kernels.ops.ssm_conv.forms import _decode_window, _keep_tail, _window
from kernels.ops.state_segments import batched_decode, each_segment


def fast_conv1d(xbc, segments, store, weight, bias):
    """Prefill as engines do it: F.conv1d over the window, SiLU in the activation dtype."""
    return each_segment(_conv1d, segments, store, (xbc,), weight, bias)


def _conv1d(xbc, state, weight, bias):
    kernel_size = weight.shape[-1]
    window = _window(xbc, state)
    out = F.conv1d(window.t()[None], weight[:, None, :], bias, groups=weight.shape[0])[0].t()
    _keep_tail(state, window, kernel_size)
    return F.silu(out)


def fast_window_sum(xbc, segments, store, weight, bias):
    """Decode as engines do it: per step, (window * w).sum(-1) + bias, SiLU; every sequence of
    a decode-only group in one go on a pooled store, as engines batch it."""
    if batched_decode(segments, store):
        window = _decode_window(xbc, segments, store)
        return F.silu((window * weight.t()).sum(dim=1) + bias)
    return each_segment(_window_sum, segments, store, (xbc,), weight, bias)


def _window_sum(xbc, state, weight, bias):
    kernel_size = weight.shape[-1]
    window = _window(xbc, state)
    rows = [(window[t:t + kernel_size].t() * weight).sum(dim=-1) + bias for t in range(xbc.shape[0])]
    _keep_tail(state, window, kernel_size)
    return F.silu(torch.stack(rows))
