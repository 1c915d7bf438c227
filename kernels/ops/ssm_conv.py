"""Mamba-2 causal depthwise conv1d over the xBC stream, then SiLU:
y_t[c] = silu(bias[c] + sum_{k<K} w[c, k] * x_{t-K+1+k}[c]), with the K-1 inputs before the
segment taken from the sequence's conv state (zeros at position 0).

Consistency: the consistent variant accumulates the K taps one by one in fp32 in a fixed
order with elementwise ops only, and uses the position-independent sigmoid, so a row's bits
do not depend on whether it was computed in prefill, in a chunk or as a one-token decode.
The fast variants are what engines run: F.conv1d for prefill, a window-sum update for
decode (a different reduction order). Reference: gates/reference/ssm.py.
"""
import torch
import torch.nn.functional as F

from kernels.ops.activation import position_independent_sigmoid


def _window(xbc, state):
    """[K-1+T, C]: the conv state's K-1 rows, then the segment's rows."""
    return window_rows(state.conv, xbc)


def window_rows(conv, xbc):
    """The conv window from the K-1 held rows `conv` and the segment's rows."""
    return torch.cat([conv.to(xbc.dtype), xbc])


def _keep_tail(state, window, kernel_size):
    state.conv = window[window.shape[0] - (kernel_size - 1):].detach()


def fast_conv1d(xbc, state, weight, bias):
    """Prefill as engines do it: F.conv1d over the window, SiLU in the activation dtype."""
    kernel_size = weight.shape[-1]
    window = _window(xbc, state)
    out = F.conv1d(window.t()[None], weight[:, None, :], bias, groups=weight.shape[0])[0].t()
    _keep_tail(state, window, kernel_size)
    return F.silu(out)


def fast_window_sum(xbc, state, weight, bias):
    """Decode as engines do it: per step, (window * w).sum(-1) + bias, SiLU."""
    kernel_size = weight.shape[-1]
    window = _window(xbc, state)
    rows = [(window[t:t + kernel_size].t() * weight).sum(dim=-1) + bias for t in range(xbc.shape[0])]
    _keep_tail(state, window, kernel_size)
    return F.silu(torch.stack(rows))


def consistent(xbc, state, weight, bias):
    """Taps accumulated in fp32 in order k = 0..K-1, one rounding after the SiLU. On CUDA one
    Triton kernel (kernels/ops/ssm_conv_triton.py) does the same terms, where these are ~24 ops."""
    if xbc.device.type == "cuda":
        from kernels.ops import ssm_conv_triton  # imports Triton: CUDA machines only
        return ssm_conv_triton.consistent(xbc, state, weight, bias)
    window = _window(xbc, state)
    _keep_tail(state, window, weight.shape[-1])
    return consistent_taps(window, weight, bias, xbc.shape[0]).to(xbc.dtype)


def consistent_taps(window, weight, bias, num_rows):
    """The consistent conv + SiLU of a window's rows, in fp32 (unrounded)."""
    acc = bias.float().expand(num_rows, -1)
    for k in range(weight.shape[-1]):
        acc = acc + weight[:, k].float() * window[k:k + num_rows].float()
    return acc * position_independent_sigmoid(acc)
