"""Per-sequence state a model reads and writes during a forward: the KV of attention layers
and, for hybrid families, the conv and SSM state of Mamba-2 mixers.

The engine supplies a paged cache (kernels/engine/cache.py); the trainer a transient one
built per forward. Both expose `kv(layer)` -> a store with write(segment, k, v) and
read(segment) -> (K, V) over positions [0, start + length), so attention reads its context
through the same path in every case.
"""
from dataclasses import dataclass

import torch

from kernels.ops.quant_regions import kv_round_trip


class KVStore:
    """What attention needs from a store: write(segment, k, v), read(segment) -> (K, V) of
    positions [0, start + length), and the two batch forms below."""

    def write_segments(self, segments, k, v) -> None:
        """Write every segment's rows of k, v [M, Hkv, D] (rows numbered as in `segments`)."""
        for segment in segments:
            self.write(segment, k[segment.rows], v[segment.rows])

    def paged(self, segments):
        """A PagedBatch over `segments` for a kernel that reads the pool itself, or None:
        this store hands out contiguous K/V through read()."""
        return None


class ContiguousKV(KVStore):
    """One layer's K/V per sequence, appended in position order (trainer side). With an FP8
    KV format it keeps decode(encode(k)), the bits the engine's paged FP8 store reads back."""

    def __init__(self, kv_format: str = "auto"):
        self.kv_format = kv_format
        self._keys: dict[int, list] = {}
        self._values: dict[int, list] = {}
        self._lengths: dict[int, int] = {}

    def write(self, segment, k, v) -> None:
        held = self._lengths.get(segment.seq_id, 0)
        if segment.start != held:
            raise ValueError(f"sequence {segment.seq_id}: write at {segment.start}, holds {held}")
        self._keys.setdefault(segment.seq_id, []).append(kv_round_trip(k, self.kv_format))
        self._values.setdefault(segment.seq_id, []).append(kv_round_trip(v, self.kv_format))
        self._lengths[segment.seq_id] = held + segment.length

    def read(self, segment):
        keys, values = self._keys[segment.seq_id], self._values[segment.seq_id]
        return torch.cat(keys)[: segment.start + segment.length], torch.cat(values)[
            : segment.start + segment.length]


class TransientCache:
    """A cache that lives for one forward pass: what the trainer uses. `pooled_mamba`: Mamba
    states in slot pools (PooledMambaStore, as the engine keeps them), so a decode-only batch
    takes the batched decode; without it (the trainer: states carry autograd) one state per
    sequence."""

    def __init__(self, num_layers: int, kv_format: str = "auto", *, pooled_mamba: bool = False):
        self._kv = [ContiguousKV(kv_format) for _ in range(num_layers)]
        self._mamba: dict[int, MambaStateStore] = {}
        self._store_type = PooledMambaStore if pooled_mamba else MambaStateStore

    @classmethod
    def for_case(cls, config, case: str) -> "TransientCache":
        """The cache a gate runs `case` on: Mamba states pooled as the engine keeps them for
        the engine cases (their decode batches take the batched forms), per sequence for the
        trainer's."""
        return cls(config.num_layers, config.kv_cache_dtype, pooled_mamba=case.startswith("engine"))

    def kv(self, layer: int) -> ContiguousKV:
        return self._kv[layer]

    def mamba(self, layer: int, **shape) -> "MambaStateStore":
        """The layer's Mamba state store, made on first use with the model's shapes."""
        if layer not in self._mamba:
            self._mamba[layer] = self._store_type(**shape)
        return self._mamba[layer]


def each_segment(form, segments, store, row_inputs, *args, **kwargs):
    """A per-segment form run over a case group's segments, each on its sequence's state;
    outputs in row order. form(*the segment's rows of row_inputs, state, *args, **kwargs)."""
    return torch.cat([form(*(t[s.rows] for t in row_inputs), store.open(s), *args, **kwargs)
                      for s in segments])


def batched_decode(segments, store) -> bool:
    """A group of one-row segments on a pooled store: a form with a batched decode takes every
    sequence's state in one call (the store's pools indexed by slot)."""
    return store.pooled and all(s.length == 1 for s in segments)


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

    def __init__(self, *, conv_rows, conv_dim, num_heads, head_dim, state_size, chunk_size, dtype, device="cpu"):
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


class PooledMambaStore(MambaStateStore):
    """One Mamba layer's states in device pools indexed by slot, as engines keep them: conv
    [slots, K-1, C], ssm [slots, H, P, N] fp32 and, for a scan that re-plays its chunk, the
    buffered rows [slots, Q, ...] fp32. A decode-only batch then reads and writes every
    sequence's state in one op per tensor (decode_slots); a segment at a time goes through
    PooledState, a view with the per-sequence interface. Pools grow by doubling."""

    pooled = True

    def __init__(self, *, conv_rows, conv_dim, num_heads, head_dim, state_size, chunk_size, dtype, device="cpu"):
        self.chunk_size = chunk_size
        self.conv = torch.zeros(1, conv_rows, conv_dim, dtype=dtype, device=device)
        self.ssm = torch.zeros(1, num_heads, head_dim, state_size, dtype=torch.float32, device=device)
        self.rows: list | None = None
        """x [slots, Q, H, P], B, C [slots, Q, G, N], dt [slots, Q, H], fp32; made on first use."""
        self._states: dict[int, PooledState] = {}
        self._free = [0]
        self._slot_tables = None  # (segments, slots [B] long): every call of one forward reuses it

    def _fresh(self) -> "PooledState":
        state = PooledState(self, self._take_slot())
        state.conv, state.ssm = 0.0, 0.0
        return state

    def _zeros(self) -> MambaSequenceState:
        return MambaSequenceState(torch.zeros_like(self.conv[0]), torch.zeros_like(self.ssm[0]))

    def _take_slot(self) -> int:
        if not self._free:
            grown = self.conv.shape[0]
            self._free = list(range(grown, 2 * grown))
            self.conv = torch.cat([self.conv, torch.zeros_like(self.conv)])
            self.ssm = torch.cat([self.ssm, torch.zeros_like(self.ssm)])
            if self.rows is not None:
                self.rows = [torch.cat([pool, torch.zeros_like(pool)]) for pool in self.rows]
            self._slot_tables = None
        return self._free.pop(0)

    def row_pools(self, rows) -> list:
        """The buffered-row pools, made on first use from one call's rows (x, B, C, dt)."""
        if self.rows is None:
            self.rows = [torch.zeros(self.conv.shape[0], self.chunk_size, *r.shape[1:], dtype=torch.float32,
                                     device=r.device) for r in rows]
        return self.rows

    def decode_slots(self, segments) -> torch.Tensor:
        """[B] long: the slot of every segment's sequence, after checking each is at its start."""
        return self.decode_tables(segments)[0]

    def decode_tables(self, segments) -> tuple:
        """([B] long slots, [B] long rows each sequence has buffered), on the pools' device in
        one copy; every door of one forward's layer reuses them (conv, then scan)."""
        if self._slot_tables is not None and self._slot_tables[0] is segments:
            return self._slot_tables[1]
        states = [self.open(segment) for segment in segments]
        packed = torch.tensor([s.slot for s in states] + [s.buffered for s in states], dtype=torch.long)
        tables = packed.to(self.conv.device, non_blocking=True).split(len(states))
        self._slot_tables = (segments, tables)
        return tables

    def holds_buffered_rows(self, segments) -> bool:
        """Whether any of these sequences has rows buffered (a consistent prefill left them)."""
        return any(self.open(segment).buffered for segment in segments)

    def advance(self, segments, *, buffered: bool) -> None:
        """Each segment's one decoded row is in the state: folded (a recurrence) or buffered,
        the chunk folded when it completes (a scan that re-plays its chunk)."""
        for segment in segments:
            state = self._states[segment.seq_id]
            if not buffered:
                if state.buffered:
                    raise ValueError(f"sequence {segment.seq_id}: a recurrence cannot fold "
                                     f"{state.buffered} buffered rows")
                state.folded += 1
            elif state.buffered + 1 == self.chunk_size:
                state.folded, state.buffered = state.folded + self.chunk_size, 0
            else:
                state.buffered += 1
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
            for pool, row in zip(self.store.row_pools(rows), rows):
                pool[self.slot, :self.buffered] = row

    @property
    def position(self) -> int:
        return self.folded + self.buffered
