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
    """A cache that lives for one forward pass: what the trainer uses."""

    def __init__(self, num_layers: int, kv_format: str = "auto"):
        self._kv = [ContiguousKV(kv_format) for _ in range(num_layers)]
        self._mamba: dict[int, MambaStateStore] = {}

    def kv(self, layer: int) -> ContiguousKV:
        return self._kv[layer]

    def mamba(self, layer: int, **shape) -> "MambaStateStore":
        """The layer's Mamba state store, made on first use with the model's shapes."""
        if layer not in self._mamba:
            self._mamba[layer] = MambaStateStore(**shape)
        return self._mamba[layer]


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
    """One Mamba layer's states by sequence; a segment starting at 0 gets a fresh state."""

    def __init__(self, *, conv_rows, conv_dim, num_heads, head_dim, state_size, dtype, device="cpu"):
        self._fresh = lambda: MambaSequenceState(
            conv=torch.zeros(conv_rows, conv_dim, dtype=dtype, device=device),
            ssm=torch.zeros(num_heads, head_dim, state_size, dtype=torch.float32, device=device))
        self._states: dict[int, MambaSequenceState] = {}

    def open(self, segment) -> MambaSequenceState:
        if segment.start == 0:
            self._states[segment.seq_id] = self._fresh()
        state = self._states.get(segment.seq_id)
        if state is None or state.position != segment.start:
            held = None if state is None else state.position
            raise ValueError(f"sequence {segment.seq_id}: state is at {held}, segment starts at {segment.start}")
        return state

    def release(self, seq_id: int) -> None:
        self._states.pop(seq_id, None)

    def clear(self) -> None:
        self._states.clear()
