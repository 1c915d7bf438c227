"""Mamba-2 causal depthwise conv1d over the xBC stream, then SiLU.

y_t[c] = silu(bias[c] + sum_{k<K} w[c, k] x_{t-K+1+k}[c]), the K-1 inputs before a segment from
its conv state (zeros at position 0). The consistent variant adds the K taps one by one in fp32 in
a fixed order, elementwise, with the position-independent sigmoid, so a row's bits do not depend
on prefill, chunk or decode. Fast: F.conv1d for prefill, a window-sum update for decode (another
order), as engines run them. Reference: gates/reference/ssm.py.
"""
import torch
import torch.nn.functional as F

from kernels.ops.ssm_conv_taps import consistent_taps, window_rows
from kernels.ops.state_segments import batched_decode, each_segment


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


def consistent(xbc, segments, store, weight, bias):
    """Taps accumulated in fp32 in order k = 0..K-1, one rounding after the SiLU. On CUDA one
    Triton kernel (kernels/ops/ssm_conv_triton.py) does the same terms, where these are ~24 ops
    a segment, and a decode-only group is one launch for every sequence."""
    if xbc.device.type == "cuda":
        from kernels.ops import ssm_conv_triton  # imports Triton: CUDA machines only
        if batched_decode(segments, store):
            return ssm_conv_triton.decode_batch(xbc, store.decode_slots(segments), store.conv, weight, bias)
        return each_segment(ssm_conv_triton.consistent, segments, store, (xbc,), weight, bias)
    if batched_decode(segments, store):  # every sequence's row in the same elementwise ops
        window = _decode_window(xbc, segments, store)
        return consistent_taps(window.transpose(0, 1), weight, bias, 1)[0].to(xbc.dtype)
    return each_segment(consistent_segment, segments, store, (xbc,), weight, bias)


def consistent_segment(xbc, state, weight, bias):
    """The consistent conv of one segment in torch ops (the CPU form)."""
    window = _window(xbc, state)
    _keep_tail(state, window, weight.shape[-1])
    return consistent_taps(window, weight, bias, xbc.shape[0]).to(xbc.dtype)
