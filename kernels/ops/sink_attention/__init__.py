"""DeepSeek-V4's attention core: one shared K = V head, each query over its own entries (the sliding
window's, then the compressed blocks it may see or chose), softmax with a per-head sink logit that
only joins the denominator: out_h = sum_l p_hl v_l, p_hl = exp(s_hl - c) / (sum_l exp(s_hl - c) +
exp(sink_h - c)). Consistency: the caller lays every query's entries out in one canonical order,
padded to a length fixed by the config (the same in every phase), so each query's scores, sums and
output are one shape's reductions over the last dim. Fast: prefill over the call's own padded length
(matmuls, a softmax with the sink concatenated), decode split-KV merged by log-sum-exp. Reference:
gates/reference/sink_attention.py.
"""
from kernels.ops.sink_attention import consistent, fast

VARIANTS = {"fast": fast.fast, "fast_split_kv": fast.fast_split_kv, "consistent": consistent.consistent}
CALL_KEYWORDS = {"scale"}
