"""Mamba-2 SSD scan per head: S_t = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T, y_t = S_t C_t + D x_t.

dt = max(softplus(dt_raw + dt_bias), dt_min), A = -exp(A_log), S in fp32, in chunks of Q rows at
absolute positions (0, Q, 2Q, ...). Consistency: a sequence keeps S at its last chunk boundary and
the unfinished chunk's rows; a call re-plays that chunk zero-padded to Q rows (one GEMM shape) and
folds S when it completes. Row t never reads later rows (sequential cumsum, masked terms selected
away, padding adds exact zeros), so prefill, any chunk split, decode and the trainer agree. Fast:
chunks from the call's first row, or the recurrence. Reference: gates/reference/ssm.py.
"""
from kernels.ops.ssm_scan import consistent, fast

VARIANTS = {"fast_chunked": fast.fast_chunked, "fast_recurrent": fast.fast_recurrent,
            "consistent": consistent.consistent}
CALL_KEYWORDS = {"chunk_size", "dt_min"}
KEEPS_UNFINISHED_CHUNK = {"consistent"}
"""Variants that leave the rows past the last chunk boundary in the state; the others fold every
row. An op writes the state (S, the rows kept); the runtime moves the sequence's position."""
