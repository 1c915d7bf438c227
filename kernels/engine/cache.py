"""Paged KV cache: one pool of fixed-size blocks per layer, a block table per sequence.

Free slots are filled with NaN, so a kernel that reads a slot nobody wrote poisons its
output instead of silently using stale values. `kv(layer)` gives the store attention writes
to and reads from (the same interface as the trainer's kernels/models/state.py).
"""
import math
from dataclasses import dataclass

import torch

from kernels.models.deepseek_state import CompressedStore
from kernels.models.mamba_pool import PooledMambaStore, delta_store
from kernels.models.mamba_state import MambaStateStore
from kernels.models.state import KVStore
from kernels.ops.quant import kv_decode, kv_encode

MAX_STEP_TABLES = 8  # step tables kept between two changes of the block tables


class PagedKVCache:
    """K/V pools [layers, blocks, block_size, Hkv, D] and per-sequence block tables; with
    kv_format "fp8" the pools hold E4M3 and reads dequantize (kernels/ops/quant.py)."""

    def __init__(self, *, num_layers, num_blocks, block_size, num_kv_heads, head_dim, dtype,
                 kv_format="auto", device="cpu"):
        shape = (num_layers, num_blocks + 1, block_size, num_kv_heads, head_dim)  # + the scratch block
        storage = torch.float8_e4m3fn if kv_format == "fp8" else dtype
        self.kv_format, self.dtype = kv_format, dtype
        self.keys = torch.full(shape, float("nan"), dtype=storage, device=device)
        self.values = torch.full(shape, float("nan"), dtype=storage, device=device)
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.scratch_block = num_blocks
        """Never handed out: a CUDA graph's padding rows write and read there (kernels/engine/graphs.py)."""
        self._free = list(range(num_blocks))
        self.block_tables: dict[int, list[int]] = {}
        self._slot_indices: dict[int, torch.Tensor] = {}
        self._step_tables = {}  # segments -> StepTables of this forward's case groups: every layer reuses them
        self.version = 0
        """Counts changes to the block tables (a decode graph re-copies its table only then)."""

    def blocks_needed(self, num_tokens: int) -> int:
        return math.ceil(num_tokens / self.block_size)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def reserve(self, seq_id: int, num_tokens: int) -> None:
        """Make room for positions [0, num_tokens) of a sequence."""
        table = self.block_tables.setdefault(seq_id, [])
        extra = self.blocks_needed(num_tokens) - len(table)
        if extra > len(self._free):
            raise RuntimeError(f"KV cache full: sequence {seq_id} needs {extra} blocks, "
                               f"{len(self._free)} free")
        for _ in range(max(0, extra)):
            table.append(self._free.pop(0))
        self._step_tables.clear()
        self.version += 1

    def release(self, seq_id: int) -> None:
        blocks = self.block_tables.pop(seq_id, [])
        self._slot_indices.pop(seq_id, None)
        self._step_tables.clear()
        self.version += 1
        self.keys[:, blocks] = float("nan")
        self.values[:, blocks] = float("nan")
        self._free.extend(blocks)

    def clear(self) -> None:
        """Drop every sequence's KV (weights changed: nothing cached is valid)."""
        for seq_id in list(self.block_tables):
            self.release(seq_id)

    def kv(self, layer: int) -> "PagedLayerKV":
        return PagedLayerKV(self, layer)

    def slot_indices(self, seq_id: int) -> torch.Tensor:
        """[len(table) * block_size] flat pool slot of every position of the sequence, on the
        pools' device: slot(p) = table[p // block_size] * block_size + p % block_size. Built
        when the sequence's table changes, not per layer and call (a host-to-device copy of
        the table per call dominated a GPU decode step)."""
        table = self.block_tables[seq_id]
        cached = self._slot_indices.get(seq_id)
        if cached is None or cached.shape[0] != len(table) * self.block_size:
            device = self.keys.device
            blocks = torch.tensor(table, dtype=torch.long, device=device)
            cached = (blocks[:, None] * self.block_size + torch.arange(self.block_size, device=device)).flatten()
            self._slot_indices[seq_id] = cached
        return cached

    def slot(self, table: list, position: int) -> int:
        """The flat pool slot of `position` in a sequence whose blocks are `table`."""
        return table[position // self.block_size] * self.block_size + position % self.block_size

    def step_tables(self, segments) -> "StepTables":
        """The block tables and row slots of one forward's segments, built once on the host
        and copied to the device in one go; every layer of the forward reuses them."""
        known = self._step_tables.get(segments)
        if known is not None:
            return known
        if len({s.seq_id for s in segments}) != len(segments):
            raise ValueError(f"a forward holds one segment per sequence: {segments}")
        width = max(len(self.block_tables[s.seq_id]) for s in segments)
        tables = [self.block_tables[s.seq_id] + [0] * (width - len(self.block_tables[s.seq_id]))
                  for s in segments]
        slots = [self.slot(self.block_tables[s.seq_id], p)
                 for s in segments for p in range(s.start, s.start + s.length)]
        fields = [[s.row for s in segments], [s.length for s in segments], [s.start for s in segments]]
        device = self.keys.device
        packed = torch.tensor([value for row in tables for value in row] + [v for f in fields for v in f],
                              dtype=torch.int32).to(device, non_blocking=True)
        count = len(segments)
        block_table, rows, lengths, starts = packed.split([count * width, count, count, count])
        tables_out = StepTables(
            block_table=block_table.view(count, width), rows=rows, lengths=lengths, starts=starts,
            write_slots=torch.tensor(slots, dtype=torch.long).to(device, non_blocking=True),
            max_length=max(s.length for s in segments))
        if len(self._step_tables) >= MAX_STEP_TABLES:  # steps between two table changes: drop the oldest
            del self._step_tables[next(iter(self._step_tables))]
        self._step_tables[segments] = tables_out
        return tables_out

    def use_step_tables(self, segments, tables: "StepTables") -> None:
        """Serve `tables` for `segments` (a CUDA graph's static buffers, filled by its runner)."""
        self._step_tables = {segments: tables}


@dataclass(frozen=True)
class StepTables:
    """One forward's segments as device tables (int32 unless noted)."""

    block_table: torch.Tensor
    """[B, max blocks] the pool blocks of each segment's sequence, padded with block 0."""
    rows: torch.Tensor
    """[B] first row of each segment in the forward's flat batch."""
    lengths: torch.Tensor
    """[B] rows of each segment."""
    starts: torch.Tensor
    """[B] absolute position of each segment's first row."""
    write_slots: torch.Tensor
    """[M] long: the pool slot each row's K/V goes to."""
    max_length: int
    """The longest segment's rows (a kernel's grid; the same for every decode step)."""


@dataclass(frozen=True)
class PagedBatch:
    """What a paged attention kernel reads for one layer and one forward."""

    key_pool: torch.Tensor
    """[num_blocks * block_size, Hkv, D] this layer's keys (FP8 when the cache is)."""
    value_pool: torch.Tensor
    tables: StepTables
    page_size: int
    dtype: torch.dtype
    """The activation dtype reads dequantize to."""


class PagedLayerKV(KVStore):
    """One layer's view of the paged cache, addressed by (sequence, position)."""

    def __init__(self, cache: PagedKVCache, layer: int):
        self.cache, self.layer = cache, layer
        self._written = None  # (segments, k, v) a fused kernel wrote: write_segments skips those

    def _pool(self, pools):
        """This layer's pool as [num_blocks * block_size, Hkv, D] (a view: writes land in it)."""
        return pools[self.layer].view(-1, *pools.shape[-2:])

    def write(self, segment, k, v) -> None:
        slots = self.cache.slot_indices(segment.seq_id)[segment.start:segment.start + segment.length]
        self._pool(self.cache.keys)[slots] = kv_encode(k, self.cache.kv_format)
        self._pool(self.cache.values)[slots] = kv_encode(v, self.cache.kv_format)

    def write_target(self, segments, v):
        """On CUDA with pools of the activations' dtype: (v, key pool, value pool, slots) for a
        kernel that writes the rows before attention (kernels/ops/qk_norm_rope_triton.py)."""
        if v.device.type != "cuda" or self.cache.kv_format != "auto" or v.dtype != self.cache.keys.dtype:
            return None
        return (v, self._pool(self.cache.keys), self._pool(self.cache.values),
                self.cache.step_tables(segments).write_slots)

    def mark_written(self, segments, k, v) -> None:
        """A kernel wrote these rows (k, v the very tensors attention gets): write_segments
        skips them; called with any other tensors or segments it writes as always."""
        self._written = (segments, k, v)

    def write_segments(self, segments, k, v) -> None:
        """All segments' rows in one scatter per pool (on CUDA one launch for both), unless
        these rows were written already (mark_written)."""
        if self._written is not None and all(a is b for a, b in zip(self._written, (segments, k, v))):
            return
        slots = self.cache.step_tables(segments).write_slots
        keys, values = self._pool(self.cache.keys), self._pool(self.cache.values)
        if k.device.type == "cuda" and self.cache.kv_format == "auto":
            from kernels.ops import kv_write_triton
            if kv_write_triton.scatter(keys, values, slots, k, v):
                return
        keys[slots] = kv_encode(k, self.cache.kv_format)
        values[slots] = kv_encode(v, self.cache.kv_format)

    def paged(self, segments) -> PagedBatch:
        return PagedBatch(self._pool(self.cache.keys), self._pool(self.cache.values),
                          self.cache.step_tables(segments), self.cache.block_size, self.cache.dtype)

    def read(self, segment):
        """K, V [start + length, Hkv, D] gathered from the sequence's blocks (exact copies)."""
        slots = self.cache.slot_indices(segment.seq_id)[:segment.start + segment.length]
        return (kv_decode(self._pool(self.cache.keys)[slots], self.cache.dtype),
                kv_decode(self._pool(self.cache.values)[slots], self.cache.dtype))


class EngineCache:
    """Everything the engine keeps per sequence: paged KV for attention layers, conv/SSM state
    in slot pools for Mamba layers (a decode step reads them batched), DeepSeek-V4's keys and
    compressor states per sequence. The scheduler reserves and releases through it, so a
    finished or invalidated sequence loses them all."""

    def __init__(self, paged: PagedKVCache):
        self.paged = paged
        self._pooled: dict[int, PooledMambaStore] = {}  # by layer: Mamba's and Gated DeltaNet's
        self._compressed: dict[int, CompressedStore] = {}

    def kv(self, layer: int) -> PagedLayerKV:
        return self.paged.kv(layer)

    def mamba(self, layer: int, **shape) -> MambaStateStore:
        if layer not in self._pooled:
            self._pooled[layer] = PooledMambaStore(**shape)
        return self._pooled[layer]

    def delta(self, layer: int, **shape) -> MambaStateStore:
        """The layer's Gated DeltaNet states in slot pools (a decode step reads them batched)."""
        if layer not in self._pooled:
            self._pooled[layer] = delta_store(**shape, pooled=True)
        return self._pooled[layer]

    def compressed(self, layer: int) -> CompressedStore:
        return self._compressed.setdefault(layer, CompressedStore(self.paged.kv_format))

    def mamba_stores(self) -> list:
        """The slot-pooled stores made so far (Mamba's and Gated DeltaNet's), in layer order: a
        decode graph serves them."""
        return [self._pooled[layer] for layer in sorted(self._pooled)]

    @property
    def num_blocks(self) -> int:
        return self.paged.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.paged.num_free_blocks

    def blocks_needed(self, num_tokens: int) -> int:
        return self.paged.blocks_needed(num_tokens)

    def reserve(self, seq_id: int, num_tokens: int) -> None:
        self.paged.reserve(seq_id, num_tokens)

    def release(self, seq_id: int) -> None:
        self.paged.release(seq_id)
        for store in (*self._pooled.values(), *self._compressed.values()):
            store.release(seq_id)

    def clear(self) -> None:
        self.paged.clear()
        for store in self._pooled.values():
            store.clear()
        self._compressed.clear()
