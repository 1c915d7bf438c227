"""DeepSeek-V4's manifold-constrained hyper-connections: the residual is N streams [T, N, D]. Into a
block: x = RMSNorm(flatten(streams)) (no weight), m = x W^T, pre = sigmoid(a_pre m_pre + b) + eps,
post = 2 sigmoid(a_post m_post + b), comb = Sinkhorn(softmax(a_comb m_comb + b) + eps), and the block
reads sum_n pre_n stream_n (the model's last collapse, HEAD, has pre alone). Out of it:
stream'_k = post_k out + sum_j comb_jk stream_j. Consistency: the projection in row tiles (batch
invariant), every sum over the N streams, the softmax and the Sinkhorn sums written out in stream
order, the mixing in fp32 rounded once. Fast: torch's sums and a bf16 matmul for the mixing, as the
reference implementation. Reference: gates/reference/hyper_connection.py.
"""
from kernels.ops.hyper_connection import consistent, fast

VARIANTS = {"fast": fast.mix_in, "consistent": consistent.mix_in}
MIX_OUT = {"fast": fast.mix_out, "consistent": consistent.mix_out}
HEAD = {"fast": fast.head, "consistent": consistent.head}
CALL_KEYWORDS = {"hc_eps", "norm_eps", "sinkhorn_iters"}
