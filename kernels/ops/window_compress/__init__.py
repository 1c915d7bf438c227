"""DeepSeek-V4's KV compressors: every window of m tokens becomes one block,
block_d = sum_j softmax_j(z_jd) kv_jd over the window's slots, z = gate + position_bias. HCA: the m
rows of the window. CSA: 2m slots, the previous window's first half (Ca) then this window's second
half (Cb); window 0's Ca slots are empty (weight 0). Consistency: windows at absolute positions, the
unfinished window's rows and the last window's Ca kept as state, each block one fp32 softmax and one
slot-ordered sum, so a prompt whole, split anywhere or token by token gives the same blocks. Fast:
the softmax cast to the kv dtype and torch's sum (prefill), a running online softmax (decode).
Reference: gates/reference/window_compress.py.
"""
from kernels.ops.window_compress import consistent, fast

VARIANTS = {"fast_prefill": fast.fast_prefill, "fast_decode": fast.fast_decode,
            "consistent": consistent.consistent}
CALL_KEYWORDS = {"rate", "overlap"}
