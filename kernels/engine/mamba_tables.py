"""The Mamba side of a decode graph (kernels/engine/graphs.py): every Mamba layer's row slots
and rows buffered as static device buffers, served to the layer's pooled store while a graph
is captured and filled from the real sequences before each replay; the model's settle of the
positions, recorded at capture, applied to the real sequences after it.
"""
from contextlib import ExitStack

import torch

from kernels.engine.pinned import StagingSets


class MambaTables:
    """[2, Mamba layers, max_batch] long: row r's slot and rows buffered, in each layer's store.
    `stores`: a callable giving the engine's pooled stores in layer order (the first forward
    makes them, so the buffers are made at the first capture)."""

    def __init__(self, stores, max_batch: int, device):
        self._stores, self.max_batch, self.device = stores, max_batch, device
        self.tables: torch.Tensor | None = None
        self._staging: StagingSets | None = None  # pinned, flat: a step's [2, layers, size] view is contiguous
        self._captured_pools = None  # the pools' addresses the captured graphs read
        self.buffered_in_graph, self.folded_in_graph = 0, 0
        """Replayed rows (per layer) of a scan that buffers its chunk, and those among them
        whose chunk completed, folded in place inside the graph (gate C5 needs some)."""

    def serve(self, segments, size: int, serving: ExitStack) -> None:
        """Reserve every store's pools, point the capture's rows at its scratch slot, and serve
        the buffers to `segments` until `serving` closes."""
        stores = self._stores()
        if not stores:
            return
        if self.tables is None:
            self.tables = torch.zeros(2, len(stores), self.max_batch, dtype=torch.long, device=self.device)
            self._staging = StagingSets(tables=(self.tables.numel(), torch.long, 0))
        for index, store in enumerate(stores):
            store.reserve(self.max_batch)
            slots, buffered = self.tables[0, index, :size], self.tables[1, index, :size]
            slots.fill_(store.scratch_slot)
            buffered.zero_()
            serving.enter_context(store.serving(segments, slots, buffered))
        self._captured_pools = self._pool_addresses(stores)

    def recorded_settles(self) -> list:
        """How each store's captured forward settled positions (rows kept or folded; None: not at all)."""
        return [store.deferred_settle for store in self._stores()]

    def moved(self) -> bool:
        """Whether a pool moved since the capture (more sequences held than reserved for): the
        graphs read the old tensors and must be captured again."""
        return self._captured_pools is not None and self._pool_addresses(self._stores()) != self._captured_pools

    def fill(self, segments, size: int, settles: list) -> bool:
        """Copy the real rows' slots and buffered counts in, padding rows on the scratch slot;
        False (nothing copied) when a store's captured doors fold every row (the fast batched
        recurrence) but a sequence holds buffered rows, which only an eager step can take."""
        stores, count = self._stores(), len(segments)
        if not stores:
            return True
        host = self._staging.next()["tables"][:2 * len(stores) * size].view(2, len(stores), size)
        for index, (store, keeps) in enumerate(zip(stores, settles)):
            slots, buffered = store.host_tables(segments)
            if keeps is False and any(buffered):
                return False
            host[0, index] = torch.tensor(slots + [store.scratch_slot] * (size - count))
            host[1, index] = torch.tensor(buffered + [0] * (size - count))
            if keeps:
                self.buffered_in_graph += count
                self.folded_in_graph += sum(b + 1 == store.chunk_size for b in buffered)
        self.tables[:, :, :size].copy_(host, non_blocking=True)
        return True

    def settle(self, segments, settles: list) -> None:
        """The captured forward's settle applied to the real sequences' positions, on the host."""
        for store, keeps in zip(self._stores(), settles):
            if keeps is not None:
                store.settle(segments, keeps_unfinished_chunk=keeps)

    @staticmethod
    def _pool_addresses(stores) -> list:
        return [tensor.data_ptr() for store in stores for tensor in store.pool_tensors()]
