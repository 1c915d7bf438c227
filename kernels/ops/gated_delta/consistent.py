"""gated_delta.consistent: chunks of Q rows at absolute positions, S folded when a chunk completes;
a row's output reads only its chunk's earlier rows and S at the chunk's start, by the same ops,
whether the trainer scans the whole sequence or the engine one row at a time. On CUDA one Triton
kernel solves each chunk row by row (triton.py): the kept rows are k, c, u, w, n (forms.KEPT) and a
decode step computes its one row. On CPU the unfinished chunk's prepared rows are kept and
re-played zero-padded to Q rows (one shape for every call): a pooled decode re-plays every
sequence's chunk in one batched call whose entries equal each call alone, because forms.chunk
hands the BLAS every entry in one layout (a measured fact: gates C02, C03, C07; not a law). The
row form in torch ops lost on CPU (benchmarks/RESULTS.md: it materialises outer products).
"""
import torch

from kernels.ops.chunk_scan import after_pending, run_chunks
from kernels.ops.gated_delta.forms import DeltaState, chunk, each_alone, prepared


def by_rows(device) -> bool:
    """Whether the consistent variant runs the row kernel here (its kept rows are forms.KEPT's)."""
    return torch.device(device).type == "cuda"


def consistent(q, k, v, g, beta, state: DeltaState, *, chunk_size: int):
    """One sequence's new rows q, k [T, Hk, K], v [T, H, V], g, beta [T, H] after `state`:
    (y [T, H, V] fp32, the state after them)."""
    if by_rows(q.device):
        import kernels.ops.gated_delta.triton as delta_triton  # imports Triton: CUDA machines only
        return delta_triton.consistent(*prepared(q, k, v, g, beta), state, chunk_size=chunk_size)
    rows = after_pending(state.pending, prepared(q, k, v, g, beta))
    y, boundary, _ = run_chunks(chunk, rows, state.ssm, chunk_size)
    total = rows[0].shape[0]
    complete = total // chunk_size * chunk_size
    rest = tuple(r[complete:] for r in rows)
    after = DeltaState(boundary, state.folded + complete, rest if rest[0].shape[0] else None)
    return y[total - q.shape[0]:], after


def consistent_many(groups, states, *, chunk_size: int):
    """Sequences' new rows, `groups` a (q, k, v, g, beta) per sequence, each after its state: (y of
    every row in the groups' order, the states after). On CUDA one set of row-kernel launches for
    all of them (the same bits as each alone: a row's arithmetic does not depend on the call's
    programs); on CPU `consistent` per sequence."""
    if not by_rows(groups[0][0].device):
        return each_alone(consistent, groups, states, chunk_size=chunk_size)
    import kernels.ops.gated_delta.triton as delta_triton  # imports Triton: CUDA machines only
    rows = [prepared(*group) for group in groups]  # per sequence, as a call of its own prepares them
    return delta_triton.consistent_many(*(torch.cat(parts) for parts in zip(*rows)), [r[0].shape[0] for r in rows],
                                        states, chunk_size=chunk_size)


def decode_pooled(q, k, v, g, beta, segments, store, *, chunk_size: int):
    """One new row per sequence on the engine's pooled store (kernels/models/mamba_pool.py), by
    tensor ops alone (a decode graph can capture it): each new prepared row written after its
    sequence's kept rows in the row pools, every chunk read back zero-padded past it and re-played
    by one batched chunk() call, S written where the chunk completes (unchanged elsewhere). The
    row counts are the runtime's to settle. On CUDA the row kernel's one-row step. y [S, H, V] fp32."""
    slots, held = store.decode_tables(segments)
    if by_rows(q.device):
        import kernels.ops.gated_delta.triton as delta_triton  # imports Triton: CUDA machines only
        return delta_triton.decode_pooled(*prepared(q, k, v, g, beta), slots, held, store.row_pools(), store.ssm,
                                          chunk_size=chunk_size)
    pools = store.row_pools()
    for pool, row in zip(pools, prepared(q, k, v, g, beta)):
        pool[slots, held] = row
    live = torch.arange(chunk_size, device=q.device)[None, :] <= held[:, None]  # [S, Q]
    chunks = [torch.where(live.view(live.shape + (1,) * (pool.dim() - 2)), pool[slots], 0.0) for pool in pools]
    state0 = store.ssm[slots]
    y, end = chunk(*chunks, state0)
    store.ssm[slots] = torch.where((held + 1 == chunk_size)[:, None, None, None], end, state0)
    return y[torch.arange(y.shape[0], device=y.device), held]
