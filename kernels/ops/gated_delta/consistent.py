"""gated_delta.consistent: chunks of Q rows at absolute positions, the unfinished chunk kept and
re-played zero-padded to Q rows (one shape for every call), S folded when a chunk completes. A
row's output reads only its chunk's earlier rows and S at the chunk's start, by the same ops on
the same shapes, whether the trainer scans the whole sequence or the engine one row at a time.
A decode step re-plays every sequence's chunk in one batched call (decode_rows; decode_pooled on
the engine's slot pools): each leading entry is one sequence's chunk, whose bits equal the call
alone because CPU BLAS and LAPACK reduce every entry of a batch alike (a measured fact: gates C02,
C03, C07; not a law).
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
    kept = [after_pending(state.pending, tuple(t[i:i + 1] for t in new)) for i, state in enumerate(states)]
    padded = [torch.stack(parts) for parts in zip(*(tuple(pad_to_multiple(r, 0, chunk_size) for r in rows)
                                                     for rows in kept))]  # [S, Q, H, *]
    held = torch.tensor([rows[0].shape[0] - 1 for rows in kept], device=q.device)
    y, folded = _replay(padded, torch.stack([state.ssm for state in states]), held, chunk_size)
    after = [DeltaState(folded[i], state.folded + chunk_size, None) if int(held[i]) + 1 == chunk_size
             else DeltaState(state.ssm, state.folded, rows) for i, (state, rows) in enumerate(zip(states, kept))]
    return y, after


def decode_pooled(q, k, v, g, beta, segments, store, *, chunk_size: int):
    """decode_rows on the engine's pooled store (kernels/models/mamba_pool.py), by tensor ops
    alone (a decode graph can capture it): each new prepared row written after its sequence's
    kept rows in the row pools, every chunk read back zero-padded past it, S written where the
    chunk completes (unchanged elsewhere). The row counts are the runtime's to settle. y [S, H, V]."""
    slots, held = store.decode_tables(segments)
    pools = store.row_pools()
    for pool, row in zip(pools, prepared(q, k, v, g, beta)):
        pool[slots, held] = row
    live = torch.arange(chunk_size, device=q.device)[None, :] <= held[:, None]  # [S, Q]
    chunks = [torch.where(live.view(live.shape + (1,) * (pool.dim() - 2)), pool[slots], 0.0) for pool in pools]
    y, folded = _replay(chunks, store.ssm[slots], held, chunk_size)
    store.ssm[slots] = folded
    return y


def _replay(chunks, state0, held, chunk_size):
    """One batched chunk() over [S, Q, H, *] chunks from state0 [S, H, K, V]: (each sequence's
    new row's y [S, H, V], S after it: the chunk's end state where it completes, else state0)."""
    y, end = chunk(*chunks, state0)
    completes = (held + 1 == chunk_size)[:, None, None, None]
    return y[torch.arange(y.shape[0], device=y.device), held], torch.where(completes, end, state0)
