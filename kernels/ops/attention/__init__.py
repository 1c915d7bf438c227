"""Causal GQA attention for the segments of one forward over their KV store (paged or contiguous).

out_t = softmax(q_t . K[:start+t+1]^T * scale) V over its own sequence. Every variant writes the
case's K/V into the store, then reads each context back through it: one KV read path for every
phase and the trainer. Consistency: the consistent kernel walks keys in `block_kv` blocks from
position 0 with an fp32 online softmax, so decode replays prefill's arithmetic for a row (fully
masked blocks leave m, l, acc unchanged: alpha = 1, p = 0); score and value GEMMs run in row tiles
(one K order at any row count); CUDA: triton.py. Reference: gates/reference/attention.py.
"""
from kernels.ops.attention import consistent, fast

VARIANTS = {"fast_sdpa": fast.fast_sdpa, "fast_split_kv": fast.fast_split_kv, "consistent": consistent.consistent}
CALL_KEYWORDS = {"scale"}
