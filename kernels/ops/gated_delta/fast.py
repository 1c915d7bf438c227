"""gated_delta's fast variants, as engines run them: prefill in chunks from the call's first row
with everything folded (a partial chunk too), and decode by the one-step recurrence (on the
engine's slot pools, every sequence's step in one batched call: recurrent_pooled)."""
import torch

from kernels.ops.chunk_scan import run_chunks
from kernels.ops.gated_delta.forms import DeltaState, chunk, prepared, step


def _folded(state: DeltaState) -> torch.Tensor:
    """S of a state with nothing pending: the fast variants fold every row they see."""
    if state.pending is not None:
        raise ValueError(f"a fast variant cannot fold {state.pending[0].shape[0]} rows a consistent call kept")
    return state.ssm


def fast_chunked(q, k, v, g, beta, state: DeltaState, *, chunk_size: int):
    """Engine prefill: chunks start at this call's first row; S after every row."""
    rows = prepared(q, k, v, g, beta)
    y, _, end = run_chunks(chunk, rows, _folded(state), chunk_size)
    return y, DeltaState(end, state.folded + q.shape[0])


def fast_recurrent(q, k, v, g, beta, state: DeltaState, *, chunk_size: int):
    """Engine decode: the recurrence row by row from S after every earlier row."""
    ssm, outputs = _folded(state), []
    for row in zip(*prepared(q, k, v, g, beta)):
        y, ssm = step(*row, ssm)
        outputs.append(y)
    return torch.stack(outputs), DeltaState(ssm, state.folded + q.shape[0])


def recurrent_pooled(q, k, v, g, beta, segments, store):
    """Engine decode of one row per sequence on the engine's pooled store, by tensor ops alone (a
    decode graph can capture it): every S read by slot, one batched recurrence step, written back.
    y [S, H, V] fp32."""
    slots = store.decode_slots(segments)
    y, after = step(*prepared(q, k, v, g, beta), store.ssm[slots])
    store.ssm[slots] = after
    return y
