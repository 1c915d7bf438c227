"""Paged KV cache: one pool of fixed-size blocks per layer, a block table per sequence.

Free slots are filled with NaN, so a kernel that reads a slot nobody wrote poisons its
output instead of silently using stale values. `kv(layer)` gives the store attention writes
to and reads from (the same interface as the trainer's kernels/models/state.py).
"""
import math

import torch

from kernels.models.state import MambaStateStore
from kernels.ops.quant_regions import kv_decode, kv_encode


class PagedKVCache:
    """K/V pools [layers, blocks, block_size, Hkv, D] and per-sequence block tables; with
    kv_format "fp8" the pools hold E4M3 and reads dequantize (kernels/ops/quant_regions.py)."""

    def __init__(self, *, num_layers, num_blocks, block_size, num_kv_heads, head_dim, dtype,
                 kv_format="auto", device="cpu"):
        shape = (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
        storage = torch.float8_e4m3fn if kv_format == "fp8" else dtype
        self.kv_format, self.dtype = kv_format, dtype
        self.keys = torch.full(shape, float("nan"), dtype=storage, device=device)
        self.values = torch.full(shape, float("nan"), dtype=storage, device=device)
        self.block_size = block_size
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks))
        self.block_tables: dict[int, list[int]] = {}
        self._slot_indices: dict[int, torch.Tensor] = {}

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

    def release(self, seq_id: int) -> None:
        blocks = self.block_tables.pop(seq_id, [])
        self._slot_indices.pop(seq_id, None)
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


class PagedLayerKV:
    """One layer's view of the paged cache, addressed by (sequence, position)."""

    def __init__(self, cache: PagedKVCache, layer: int):
        self.cache, self.layer = cache, layer

    def _pool(self, pools):
        """This layer's pool as [num_blocks * block_size, Hkv, D] (a view: writes land in it)."""
        return pools[self.layer].view(-1, *pools.shape[-2:])

    def write(self, segment, k, v) -> None:
        slots = self.cache.slot_indices(segment.seq_id)[segment.start:segment.start + segment.length]
        self._pool(self.cache.keys)[slots] = kv_encode(k, self.cache.kv_format)
        self._pool(self.cache.values)[slots] = kv_encode(v, self.cache.kv_format)

    def read(self, segment):
        """K, V [start + length, Hkv, D] gathered from the sequence's blocks (exact copies)."""
        slots = self.cache.slot_indices(segment.seq_id)[:segment.start + segment.length]
        return (kv_decode(self._pool(self.cache.keys)[slots], self.cache.dtype),
                kv_decode(self._pool(self.cache.values)[slots], self.cache.dtype))


class EngineCache:
    """Everything the engine keeps per sequence: paged KV for attention layers, fp32 conv/SSM
    state for Mamba layers. The scheduler reserves and releases through it, so a finished
    or invalidated sequence loses both."""

    def __init__(self, paged: PagedKVCache):
        self.paged = paged
        self._mamba: dict[int, MambaStateStore] = {}

    def kv(self, layer: int) -> PagedLayerKV:
        return self.paged.kv(layer)

    def mamba(self, layer: int, **shape) -> MambaStateStore:
        if layer not in self._mamba:
            self._mamba[layer] = MambaStateStore(**shape)
        return self._mamba[layer]

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
        for store in self._mamba.values():
            store.release(seq_id)

    def clear(self) -> None:
        self.paged.clear()
        for store in self._mamba.values():
            store.clear()
