"""Mamba-2 causal depthwise conv1d over the xBC stream, then SiLU.

y_t[c] = silu(bias[c] + sum_{k<K} w[c, k] x_{t-K+1+k}[c]), the K-1 inputs before a segment from
its conv state (zeros at position 0). The consistent variant adds the K taps one by one in fp32 in
a fixed order, elementwise, with the position-independent sigmoid, so a row's bits do not depend
on prefill, chunk or decode. Fast: F.conv1d for prefill, a window-sum update for decode (another
order), as engines run them. Reference: gates/reference/ssm.py.
"""
from kernels.ops.ssm_conv import consistent, fast

VARIANTS = {"fast_conv1d": fast.fast_conv1d, "fast_window_sum": fast.fast_window_sum,
            "consistent": consistent.consistent}
CALL_KEYWORDS = frozenset()
