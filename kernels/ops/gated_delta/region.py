"""gated_delta as a model region calls it: one case group's rows (q, k [M, Hk, K], v [M, H, V] after
the short conv, the raw decay and beta projections a, b [M, H]), each segment on the state its
sequence's store opens (conv rows, S and the kept rows of MambaSequenceState; its position is the
model's to settle), with the gates made here: g = -exp(A_log) * softplus(a + dt_bias), beta =
sigmoid(b), in fp32. The consistent forms take the position-independent softplus and sigmoid
(torch's vector bodies and scalar tails round differently); the fast ones take torch's, and round
y to q's dtype as transformers' Qwen3.5 does.
"""
from functools import partial

import torch
import torch.nn.functional as F

from kernels.ops.activation.consistent import position_independent_sigmoid, position_independent_softplus
from kernels.ops.gated_delta.consistent import consistent_many, decode_pooled
from kernels.ops.gated_delta.fast import fast_chunked as fast_chunked_sequence
from kernels.ops.gated_delta.fast import fast_recurrent as fast_recurrent_sequence
from kernels.ops.gated_delta.fast import recurrent_pooled
from kernels.ops.gated_delta.forms import DeltaState, each_alone
from kernels.ops.state_segments import batched_decode


def _gates(a, b, A_log, dt_bias, softplus, sigmoid):
    """(g, beta) [M, H] fp32."""
    return -torch.exp(A_log.float()) * softplus(a.float() + dt_bias.float()), sigmoid(b.float())


def _segments(many, rows, segments, store, chunk_size):
    """many (a many-sequence form) over every segment on its sequence's state, S and the kept rows
    written back; y in row order."""
    opened = [store.open(segment) for segment in segments]
    y, after = many([tuple(t[segment.rows] for t in rows) for segment in segments],
                    [DeltaState(state.ssm, state.folded, state.pending) for state in opened], chunk_size=chunk_size)
    for state, its_after in zip(opened, after):
        state.ssm, state.pending = its_after.ssm, its_after.pending
    return y


def consistent(q, k, v, a, b, segments, store, A_log, dt_bias, *, chunk_size):
    """Chunks at absolute positions, the unfinished chunk kept and re-played: y [M, H, V] fp32.
    A call of one row per sequence on the engine's pools re-plays them together (decode_pooled)."""
    g, beta = _gates(a, b, A_log, dt_bias, position_independent_softplus, position_independent_sigmoid)
    rows = (q, k, v, g, beta)
    if batched_decode(segments, store):
        return decode_pooled(*rows, segments, store, chunk_size=chunk_size)
    return _segments(consistent_many, rows, segments, store, chunk_size)


def _fast(form, pooled=None):
    def fast(q, k, v, a, b, segments, store, A_log, dt_bias, *, chunk_size):
        g, beta = _gates(a, b, A_log, dt_bias, F.softplus, torch.sigmoid)
        if pooled is not None and batched_decode(segments, store) and not store.holds_buffered_rows(segments):
            return pooled(q, k, v, g, beta, segments, store).to(q.dtype)
        return _segments(partial(each_alone, form), (q, k, v, g, beta), segments, store, chunk_size).to(q.dtype)
    fast.__name__ = form.__name__
    fast.__doc__ = f"{form.__doc__} y rounded to q's dtype."
    return fast


fast_chunked = _fast(fast_chunked_sequence)
fast_recurrent = _fast(fast_recurrent_sequence, pooled=recurrent_pooled)
