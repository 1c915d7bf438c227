"""Per-sequence state of a forward: attention KV and, in hybrids, Mamba-2 conv and SSM state.

The engine supplies a paged cache (kernels/engine/cache.py), the trainer a transient one per
forward. Both expose `kv(layer)`, a store with write(segment, k, v) and read(segment) -> (K, V)
over positions [0, start + length), so attention reads its context by one path in every case.
"""
import torch

from kernels.models.deepseek_state import CompressedStore
from kernels.models.mamba_pool import PooledMambaStore, delta_store
from kernels.models.mamba_state import MambaStateStore
from kernels.ops.quant import kv_round_trip


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

    def write_target(self, segments, v):
        """(v, key pool, value pool, slots) where a kernel before attention may write these
        rows itself (then mark_written), or None: this store writes them in write_segments."""
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
        """Append at the sequence's end; a segment at 0 starts the sequence anew (a layer
        recomputed in backward writes its keys again, as the Mamba store reopens its state)."""
        if segment.start == 0:
            for held_lists in (self._keys, self._values, self._lengths):
                held_lists.pop(segment.seq_id, None)
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
        self.kv_format = kv_format
        self._recurrent: dict[int, MambaStateStore] = {}  # a Mamba or a DeltaNet layer's store, by layer
        self._compressed: dict[int, CompressedStore] = {}
        self._pooled = pooled_mamba

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
        if layer not in self._recurrent:
            self._recurrent[layer] = (PooledMambaStore if self._pooled else MambaStateStore)(**shape)
        return self._recurrent[layer]

    def delta(self, layer: int, **shape) -> MambaStateStore:
        """The layer's Gated DeltaNet state store (pooled as Mamba's), made on first use."""
        if layer not in self._recurrent:
            self._recurrent[layer] = delta_store(**shape, pooled=self._pooled)
        return self._recurrent[layer]

    def compressed(self, layer: int) -> CompressedStore:
        """The layer's DeepSeek-V4 attention states (kernels/models/deepseek_state.py)."""
        return self._compressed.setdefault(layer, CompressedStore(self.kv_format))
