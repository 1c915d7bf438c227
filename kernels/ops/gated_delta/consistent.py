"""gated_delta.consistent: chunks of Q rows at absolute positions, the unfinished chunk kept and
re-played zero-padded to Q rows (one shape for every call), S folded when a chunk completes. A
row's output reads only its chunk's earlier rows and S at the chunk's start, by the same ops on
the same shapes, whether the trainer scans the whole sequence or the engine one row at a time.
"""
from kernels.ops.chunk_scan import after_pending, run_chunks
from kernels.ops.gated_delta.forms import DeltaState, chunk, prepared


def consistent(q, k, v, g, beta, state: DeltaState, *, chunk_size: int):
    """One sequence's new rows q, k [T, Hk, K], v [T, H, V], g, beta [T, H] after `state`:
    (y [T, H, V] fp32, the state after them)."""
    rows = after_pending(state.pending, prepared(q, k, v, g, beta))
    y, boundary, _ = run_chunks(chunk, rows, state.ssm, chunk_size)
    total = rows[0].shape[0]
    complete = total // chunk_size * chunk_size
    rest = tuple(r[complete:] for r in rows)
    after = DeltaState(boundary, state.folded + complete, rest if rest[0].shape[0] else None)
    return y[total - q.shape[0]:], after
