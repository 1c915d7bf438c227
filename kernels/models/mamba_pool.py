"""The engine's Mamba-2 state store: every sequence's state in device pools indexed by slot,
so a decode-only batch reads and writes them all in one op per tensor (the batched forms of
kernels/ops/ssm_conv/ and ssm_scan/); a segment at a time goes through PooledState. A Gated
DeltaNet layer keeps the same pools with its own kept-row shapes (delta_store, below).
"""
from contextlib import contextmanager

import torch

from kernels.models.mamba_state import MambaSequenceState, MambaStateStore
from kernels.ops.gated_delta.consistent import by_rows
from kernels.ops.gated_delta.forms import kept_row_shapes


class PooledMambaStore(MambaStateStore):
    """One Mamba layer's states in device pools indexed by slot, as engines keep them: conv
    [slots, K-1, C], ssm [slots, H, P, N] fp32 and, for a scan that re-plays its chunk, the
    buffered rows [slots, Q, ...] fp32. A decode-only batch then reads and writes every
    sequence's state in one op per tensor (decode_slots); a segment at a time goes through
    PooledState, a view with the per-sequence interface. Pools grow by doubling."""

    pooled = True

    def __init__(self, *, conv_rows, conv_dim, num_heads, head_dim, state_size, num_groups, chunk_size, dtype,
                 device="cpu", row_shapes=None):
        self.chunk_size = chunk_size
        self.conv = torch.zeros(1, conv_rows, conv_dim, dtype=dtype, device=device)
        self.ssm = torch.zeros(1, num_heads, head_dim, state_size, dtype=torch.float32, device=device)
        self._row_shapes = row_shapes or ((num_heads, head_dim), (num_groups, state_size), (num_groups, state_size),
                                          (num_heads,))
        self.rows: list | None = None
        """Mamba's x [slots, Q, H, P], B, C [slots, Q, G, N], dt [slots, Q, H] (or `row_shapes`'),
        fp32; made on first use."""
        self._states: dict[int, PooledState] = {}
        self._free = [0]
        self._slot_tables = None  # (segments, what _decode_tables returns): reused by every door of a forward's layer
        self._served = None  # (segments, tables) a CUDA graph's static buffers stand for (serving)
        self.scratch_slot: int | None = None
        """A slot no sequence holds: a graph's padding rows read and write it (reserve)."""
        self.deferred_settle: bool | None = None
        """How a served forward's settle asked to move its sequences (keeps_unfinished_chunk), not yet applied."""

    def _fresh(self) -> "PooledState":
        state = PooledState(self, self._take_slot())
        state.conv, state.ssm = 0.0, 0.0
        return state

    def _zeros(self) -> MambaSequenceState:
        return MambaSequenceState(torch.zeros_like(self.conv[0]), torch.zeros_like(self.ssm[0]))

    def _take_slot(self) -> int:
        if not self._free:
            self._grow()
        return self._free.pop(0)

    def _grow(self) -> None:
        """Twice the slots; the new ones free. Moves every pool (a captured graph's too)."""
        grown = self.conv.shape[0]
        self._free.extend(range(grown, 2 * grown))
        self.conv = torch.cat([self.conv, torch.zeros_like(self.conv)])
        self.ssm = torch.cat([self.ssm, torch.zeros_like(self.ssm)])
        if self.rows is not None:
            self.rows = [torch.cat([pool, torch.zeros_like(pool)]) for pool in self.rows]
        self._slot_tables = None

    def row_pools(self) -> list:
        """The buffered-row pools (x, B, C, dt), made on first use."""
        if self.rows is None:
            self.rows = [torch.zeros(self.conv.shape[0], self.chunk_size, *shape, dtype=torch.float32,
                                     device=self.conv.device) for shape in self._row_shapes]
        return self.rows

    def reserve(self, num_slots: int) -> None:
        """Room for num_slots sequences and a scratch slot, the row pools made: a CUDA graph
        captured over the pools finds the same tensors at every replay while no more
        sequences than that are held (pool_tensors tells a replay when they moved)."""
        if self.scratch_slot is None:
            self.scratch_slot = self._take_slot()
        while self.conv.shape[0] < num_slots + 1:
            self._grow()
        self.row_pools()

    def pool_tensors(self) -> list:
        """Every tensor a captured decode reads or writes in place."""
        return [self.conv, self.ssm, *self.row_pools()]

    def decode_slots(self, segments) -> torch.Tensor:
        """[B] long: the slot of every segment's sequence, after checking each is at its start."""
        return self.decode_tables(segments)[0]

    def decode_tables(self, segments) -> tuple:
        """([B] long slots, [B] long rows each sequence has buffered), on the pools' device in
        one copy; every door of one forward's layer reuses them (conv, then scan)."""
        return self._decode_tables(segments)[0]

    def holds_buffered_rows(self, segments) -> bool:
        """Whether any of these sequences has rows buffered (a consistent prefill left them)."""
        return self._decode_tables(segments)[1]

    def _decode_tables(self, segments) -> tuple:
        """(decode_tables, whether any sequence holds buffered rows): each sequence opened once
        per forward's layer, its position checked. Served segments get the served buffers."""
        if self._served is not None and self._served[0] is segments:
            return self._served[1], False
        if self._slot_tables is None or self._slot_tables[0] is not segments:
            slots, buffered = self.host_tables(segments)
            packed = torch.tensor(slots + buffered, dtype=torch.long)
            tables = packed.to(self.conv.device, non_blocking=True).split(len(slots))
            self._slot_tables = (segments, (tables, any(buffered)))
        return self._slot_tables[1]

    def host_tables(self, segments) -> tuple[list, list]:
        """(slots, rows buffered) of these segments' sequences, as host lists; each opened."""
        states = [self.open(segment) for segment in segments]
        return [s.slot for s in states], [s.buffered for s in states]

    @contextmanager
    def serving(self, segments, slots: torch.Tensor, buffered: torch.Tensor):
        """While in it, the doors read these device tables for `segments` (a CUDA graph's
        static buffers, filled before each replay) and the model's settle is only recorded in
        deferred_settle: the graph's runner applies it to the real sequences after a replay.
        The served forward counts as one without buffered rows (the fast decode's batched
        recurrence is the one captured; a replay of rows it cannot fold goes eager)."""
        self._served, self.deferred_settle = (segments, (slots, buffered)), None
        try:
            yield
        finally:
            self._served = None

    def settle(self, segments, *, keeps_unfinished_chunk: bool) -> None:
        """Each segment's sequence moved to the segment's end after a scan wrote its state: the
        rows past the last chunk boundary buffered (a scan that re-plays its chunk) or none
        (every row folded). A served forward's is deferred: the graph's runner applies it to
        the real sequences after a replay."""
        if self._served is not None and self._served[0] is segments:
            self.deferred_settle = keeps_unfinished_chunk
            return
        for segment in segments:
            state, end = self._states[segment.seq_id], segment.start + segment.length
            state.buffered = end % self.chunk_size if keeps_unfinished_chunk else 0
            state.folded = end - state.buffered
        self._slot_tables = None

    def release(self, seq_id: int) -> None:
        state = self._states.pop(seq_id, None)
        if state is not None:
            self._free.append(state.slot)
            self._slot_tables = None

    def clear(self) -> None:
        for seq_id in list(self._states):
            self.release(seq_id)


class PooledState:
    """One sequence's state in a PooledMambaStore: MambaSequenceState's fields, read as views
    of its slot and written into it (a per-segment door then works unchanged)."""

    def __init__(self, store: PooledMambaStore, slot: int):
        self.store, self.slot = store, slot
        self.folded = 0
        self.buffered = 0
        """Rows of the unfinished chunk held in the store's row pools."""

    @property
    def conv(self) -> torch.Tensor:
        return self.store.conv[self.slot]

    @conv.setter
    def conv(self, value) -> None:
        self.store.conv[self.slot] = value

    @property
    def ssm(self) -> torch.Tensor:
        return self.store.ssm[self.slot]

    @ssm.setter
    def ssm(self, value) -> None:
        self.store.ssm[self.slot] = value

    @property
    def pending(self) -> list | None:
        if not self.buffered:
            return None
        return [pool[self.slot, :self.buffered] for pool in self.store.rows]

    @pending.setter
    def pending(self, rows) -> None:
        self.buffered = 0 if rows is None else rows[0].shape[0]
        if rows is not None:
            for pool, row in zip(self.store.row_pools(), rows):
                pool[self.slot, :self.buffered] = row

    @property
    def position(self) -> int:
        return self.folded + self.buffered


def delta_store(*, conv_rows, conv_dim, num_heads, key_dim, value_dim, dtype, device="cpu", chunk_size=0,
                pooled=False) -> MambaStateStore:
    """A Gated DeltaNet layer's states: conv rows and S [H, K, V] fp32 per sequence, the rows a
    consistent call keeps in each state (kernels/ops/gated_delta/region.py); pooled (the engine's),
    in slot pools whose kept rows are the row kernel's (forms.KEPT) where the consistent variant
    runs it (CUDA), else the rule's prepared q, k [H, K], v [H, V], g and beta [H]."""
    shape = dict(conv_rows=conv_rows, conv_dim=conv_dim, num_heads=num_heads, head_dim=key_dim, state_size=value_dim,
                 num_groups=1, dtype=dtype, device=device)
    if not pooled:
        return MambaStateStore(**shape, chunk_size=0)
    rows = ((num_heads, key_dim), (num_heads, key_dim), (num_heads, value_dim), (num_heads,), (num_heads,))
    if by_rows(device):
        rows = kept_row_shapes(num_heads, key_dim, value_dim)
    return PooledMambaStore(**shape, chunk_size=chunk_size, row_shapes=rows)
