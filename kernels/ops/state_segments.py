"""How a stateful op (the Mamba conv and scan) meets a case group: per segment, each on the
state its sequence's store opens, or, for a group of one-row segments on a pooled store (the
engine's), once for every sequence. The store is the runtime's (kernels/models/mamba_state.py,
mamba_pool.py); an op needs only `open(segment)` and `pooled` of it, and writes the state's
tensors (S, the rows it keeps) but never a sequence's position: the model settles that after the
call (kernels/models/batch.py: settle_per_case).
"""
import torch


def each_segment(form, segments, store, row_inputs, *args, **kwargs):
    """A per-segment form run over a case group's segments, each on its sequence's state;
    outputs in row order. form(*the segment's rows of row_inputs, state, *args, **kwargs)."""
    return torch.cat([form(*(t[s.rows] for t in row_inputs), store.open(s), *args, **kwargs)
                      for s in segments])


def batched_decode(segments, store) -> bool:
    """A group of one-row segments on a pooled store: a form with a batched decode takes every
    sequence's state in one call (the store's pools indexed by slot)."""
    return store.pooled and all(s.length == 1 for s in segments)
