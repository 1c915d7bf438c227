"""Per-sequence state a model reads and writes during a forward: the KV of attention layers
(and, for hybrid families, the recurrent state of stateful mixers).

The engine supplies a paged cache (kernels/engine/cache.py); the trainer a transient one
built per forward. Both expose `kv(layer)` -> a store with write(segment, k, v) and
read(segment) -> (K, V) over positions [0, start + length), so attention reads its context
through the same path in every case.
"""
import torch


class ContiguousKV:
    """One layer's K/V per sequence, appended in position order (trainer side)."""

    def __init__(self):
        self._keys: dict[int, list] = {}
        self._values: dict[int, list] = {}
        self._lengths: dict[int, int] = {}

    def write(self, segment, k, v) -> None:
        held = self._lengths.get(segment.seq_id, 0)
        if segment.start != held:
            raise ValueError(f"sequence {segment.seq_id}: write at {segment.start}, holds {held}")
        self._keys.setdefault(segment.seq_id, []).append(k)
        self._values.setdefault(segment.seq_id, []).append(v)
        self._lengths[segment.seq_id] = held + segment.length

    def read(self, segment):
        keys, values = self._keys[segment.seq_id], self._values[segment.seq_id]
        return torch.cat(keys)[: segment.start + segment.length], torch.cat(values)[
            : segment.start + segment.length]


class TransientCache:
    """A cache that lives for one forward pass: what the trainer uses."""

    def __init__(self, num_layers: int):
        self._kv = [ContiguousKV() for _ in range(num_layers)]

    def kv(self, layer: int) -> ContiguousKV:
        return self._kv[layer]
