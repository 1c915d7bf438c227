"""Gated DeltaNet's delta rule per value head (Qwen3.5, Qwen3-Next): with q, k L2-normalised and q
scaled by K^-1/2, S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - k_t^T exp(g_t) S_{t-1}))^T and
y_t = S_t^T q_t, S [K, V] in fp32. The chunked form solves a chunk's Q updates with one unit
lower-triangular system (the UT transform). Consistency as ssm_scan's: chunks at absolute positions,
S kept at the last boundary, the unfinished chunk's rows kept and re-played zero-padded to Q rows;
a padded row has g = beta = 0, so it moves neither the decay nor S. Fast: chunks from the call's
first row with everything folded, or the one-step recurrence. The variants a contract binds take
a case group's segments and make the gates (region.py). Reference: gates/reference/gated_delta.py.
"""
from kernels.ops.gated_delta import region

VARIANTS = {"fast_chunked": region.fast_chunked, "fast_recurrent": region.fast_recurrent,
            "consistent": region.consistent}
CALL_KEYWORDS = {"chunk_size"}
KEEPS_UNFINISHED_CHUNK = {"consistent"}
"""As ssm_scan's: the variants whose state keeps the unfinished chunk's rows."""
