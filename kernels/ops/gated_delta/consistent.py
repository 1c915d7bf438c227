"""gated_delta.consistent: chunks of Q rows at absolute positions, the unfinished chunk kept and
re-played zero-padded to Q rows (one shape for every call), S folded when a chunk completes. A
row's output reads only its chunk's earlier rows and S at the chunk's start, by the same ops on
the same shapes, whether the trainer scans the whole sequence or the engine one row at a time.
A decode step re-plays every sequence's chunk in one batched call (decode_rows): each leading
entry is one sequence's chunk, whose bits equal the call alone because CPU BLAS and LAPACK reduce
every entry of a batch alike (a measured fact: gates C02, C03, C07; not a law).
"""
import torch

from kernels.ops.chunk_scan import after_pending, run_chunks
from kernels.ops.gated_delta.forms import DeltaState, chunk, prepared
from kernels.ops.padding import pad_to_multiple


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


def decode_rows(q, k, v, g, beta, states: list, *, chunk_size: int):
    """One new row per sequence (row i after states[i]): every sequence's kept rows and new row,
    zero-padded to one chunk, re-played by one batched chunk() call. (y [S, H, V] fp32, the states
    after them: S folded where the chunk completes, else the rows kept)."""
    new = prepared(q, k, v, g, beta)
    chunks, kept = [], []
    for i, state in enumerate(states):
        rows = after_pending(state.pending, tuple(t[i:i + 1] for t in new))
        chunks.append(tuple(pad_to_multiple(r, 0, chunk_size) for r in rows))
        kept.append(rows)
    padded = [torch.stack(parts) for parts in zip(*chunks)]  # [S, Q, H, *]
    y, end = chunk(*padded, torch.stack([state.ssm for state in states]))
    outputs, after = [], []
    for i, (state, rows) in enumerate(zip(states, kept)):
        row = rows[0].shape[0] - 1
        outputs.append(y[i, row])
        if row + 1 == chunk_size:
            after.append(DeltaState(end[i], state.folded + chunk_size, None))
        else:
            after.append(DeltaState(state.ssm, state.folded, rows))
    return torch.stack(outputs), after
