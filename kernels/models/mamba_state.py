"""A Mamba-2 layer's per-sequence state (conv rows, SSM state, buffered rows) and the store
the conv and scan ops open it from (kernels/ops/state_segments.py), one state per sequence (the
trainer's: states carry autograd); kernels/models/mamba_pool.py keeps them in slot pools for the
engine. A Gated DeltaNet layer keeps the same fields (S [H, K, V], its kept rows): per sequence in
the trainer, in the engine's slot pools (mamba_pool.delta_store).
"""
from dataclasses import dataclass

import torch


@dataclass
class MambaSequenceState:
    """One sequence's Mamba-2 state in one layer."""

    conv: torch.Tensor
    """[K-1, conv_dim] the last raw conv inputs (zeros before position 0)."""
    ssm: torch.Tensor
    """[H, P, N] fp32 state after the first `folded` tokens."""
    folded: int = 0
    """Tokens whose contribution is in `ssm`."""
    pending: list | None = None
    """Rows after `folded` not yet in `ssm` (x, B, C, dt), for scans that re-play a chunk."""

    @property
    def position(self) -> int:
        """The next token's position."""
        return self.folded + (0 if self.pending is None else self.pending[0].shape[0])


class MambaStateStore:
    """One Mamba layer's states by sequence. chunk_size: the rows a pooled store buffers per
    sequence (a scan that re-plays its chunk); this store keeps them in the state itself."""

    pooled = False
    """True for PooledMambaStore: the batched decode forms (ssm_conv, ssm_scan) need its pools."""

    def __init__(self, *, conv_rows, conv_dim, num_heads, head_dim, state_size, num_groups, chunk_size, dtype,
                 device="cpu"):
        del num_groups  # a pooled store sizes its row pools by it; here the rows live in each state
        self._fresh = lambda: MambaSequenceState(
            conv=torch.zeros(conv_rows, conv_dim, dtype=dtype, device=device),
            ssm=torch.zeros(num_heads, head_dim, state_size, dtype=torch.float32, device=device))
        self._states: dict[int, MambaSequenceState] = {}

    def open(self, segment) -> MambaSequenceState:
        """The segment's sequence's state, checked to be at the segment's start. A segment at 0
        gets a fresh state unless the one held is still at 0: the conv door of the same
        forward opened it (conv moves no position) and the scan door continues it."""
        state = self._states.get(segment.seq_id)
        if segment.start == 0 and (state is None or state.position != 0):
            self.release(segment.seq_id)
            state = self._states[segment.seq_id] = self._fresh()
        if state is None or state.position != segment.start:
            held = None if state is None else state.position
            raise ValueError(f"sequence {segment.seq_id}: state is at {held}, segment starts at {segment.start}")
        return state

    def settle(self, segments, *, keeps_unfinished_chunk: bool) -> None:
        """Each segment's sequence moved to the segment's end after a scan wrote its state (S and
        the rows it kept): the runtime's books, never the op's. ValueError when the rows kept
        disagree with what the bound variant declares (every row folded, or some kept)."""
        for segment in segments:
            state, end = self._states[segment.seq_id], segment.start + segment.length
            kept = 0 if state.pending is None else state.pending[0].shape[0]
            if kept and not keeps_unfinished_chunk:
                raise ValueError(f"sequence {segment.seq_id}: {kept} rows kept by a scan declared to fold every row")
            state.folded = end - kept

    def held(self, seq_id: int) -> MambaSequenceState:
        """The sequence's state as it is (KeyError if none)."""
        return self._states[seq_id]

    def snapshot(self, segments) -> "MambaStateStore":
        """A store holding copies of the states these segments open (a door capture's replay
        input): a fresh state for a segment at position 0, else a copy of the sequence's."""
        copies = {}
        for segment in segments:
            state = self._zeros() if segment.start == 0 else self.held(segment.seq_id)
            copies[segment.seq_id] = MambaSequenceState(
                state.conv.detach().clone(), state.ssm.detach().clone(), state.folded,
                None if state.pending is None else [t.detach().clone() for t in state.pending])
        return MambaStateStore.holding(copies)

    def _zeros(self) -> MambaSequenceState:
        return self._fresh()

    @classmethod
    def holding(cls, states: dict) -> "MambaStateStore":
        """A store of these states {seq_id: MambaSequenceState}; fresh ones are zeros shaped like them."""
        store = cls.__new__(cls)
        template = next(iter(states.values()))
        store._states = dict(states)
        store._fresh = lambda: MambaSequenceState(torch.zeros_like(template.conv), torch.zeros_like(template.ssm))
        return store

    def release(self, seq_id: int) -> None:
        self._states.pop(seq_id, None)

    def clear(self) -> None:
        self._states.clear()
