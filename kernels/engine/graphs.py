"""CUDA graphs for the engine's decode steps: one captured forward per padded batch size.

All sizes are captured at the first decode step; a step of B sequences replays the smallest size
>= B, reading what changes per step (token ids, positions, the cache's step tables, Mamba slots:
mamba_tables.py) from static buffers filled before the replay; padding rows use scratch blocks.
Capture runs on dummy sequences, so the consistent kernels decide tiles by the padded size only
and read positions and contexts from the buffers (gate C5: replays equal eager steps bit for bit).
The head is captured too (graph_head.py); steps a graph cannot run and multi-process layouts: eager.
"""
from contextlib import ExitStack

import torch

from kernels.engine.cache import StepTables
from kernels.engine.graph_head import GraphHead, tensor_draw
from kernels.engine.mamba_tables import MambaTables
from kernels.engine.pinned import StagingSets
from kernels.models.batch import Segment, TokenBatch
from kernels.ops.sampler.forms import truncates

GRAPH_CASE = "engine_graph"
SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def graphs_unsupported(config, parallel) -> str | None:
    """Why this engine cannot replay decode graphs, or None."""
    if parallel is not None:
        return "a TP/EP layout across processes: its collectives are not captured"
    if config.family == "deepseek":
        return "deepseek keeps per-sequence keys and compressor states in Python lists: nothing to replay"
    return None


class DecodeGraphs:
    """Captured decode forwards of one engine's model, keyed by padded batch size."""

    def __init__(self, model, dispatch, cache, max_batch: int, device):
        if torch.device(device).type != "cuda":
            raise ValueError(f"cuda_graphs: the engine runs on {device}; CUDA graphs need a CUDA device")
        self.model, self.dispatch, self.cache = model, dispatch, cache
        self.sizes = tuple(s for s in SIZES if s < max_batch) + (max_batch,)
        paged = cache.paged
        width = paged.num_blocks  # a sequence may hold every block
        self.tokens = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.positions = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.write_slots = torch.zeros(max_batch, dtype=torch.long, device=device)
        self.block_table = torch.zeros(max_batch, width, dtype=torch.int32, device=device)
        self.rows_lengths_starts = torch.zeros(3, max_batch, dtype=torch.int32, device=device)
        self.mamba = MambaTables(cache.mamba_stores, max_batch, device)
        self.head = GraphHead(max_batch, device)
        self.device = device
        # flat, so a step's [3, size] view is contiguous (a strided pinned source would be staged)
        self._staging = StagingSets(longs=(3 * max_batch, torch.long, 0),  # tokens, positions, slots
                                    ints=(3 * max_batch, torch.int32, 0),  # rows, lengths, starts
                                    table=(max_batch * width, torch.int32, 0))
        self._table_key = None  # (seq ids, size, cache version) the device block table holds
        self._graphs: dict[int, tuple] = {}
        self._pool = None
        self.replays: dict[int, int] = {}
        """Replays per padded size."""
        self.padded_replays = 0
        """Replays with fewer real rows than the graph's size (gate C5 needs some)."""
        self.eager_steps = 0
        """Decode steps the captured forward could not run, run eagerly instead."""
        self.head_replays = 0
        """Replays whose rows the captured head sampled."""
        self.rows_sampled_in_graph = 0
        """Rows whose token the captured draw chose (no top-k / top-p; gate C5 needs some)."""

    def launch(self, segments, token_ids, params_list, draw_indices, wants_full: bool):
        """(hidden [B, hidden], None) of a decode step, or (None, (tokens [B], log-probs [B]))
        on the device when the captured head sampled it, by replaying the size's graph;
        `token_ids`: a host list, or a device tensor (a step launched ahead). Nothing waits."""
        count = len(segments)
        size = next(s for s in self.sizes if s >= count)
        if self.mamba.moved():
            self._graphs.clear()
        if size not in self._graphs:  # every size at once, as serving engines start: no capture mid-run
            for each in sorted(set(self.sizes) - set(self._graphs), reverse=True):  # largest first: one pool
                self._graphs[each] = self._capture(each)
        graph, hidden, sampled, settles = self._graphs[size]
        if not self.mamba.fill(segments, size, settles):
            self.eager_steps += 1
            ids = token_ids if torch.is_tensor(token_ids) else torch.tensor(token_ids, dtype=torch.long)
            batch = TokenBatch(ids.to(self.device, non_blocking=True), segments, GRAPH_CASE)
            return self.model(batch, self.dispatch, self.cache), None
        self._fill(token_ids, segments, size)
        head = sampled is not None and not wants_full
        if head:
            self.head.fill(params_list, draw_indices, size)
        graph.replay()
        self.mamba.settle(segments, settles)
        self.replays[size] = self.replays.get(size, 0) + 1
        self.padded_replays += count < size
        if not head:
            return hidden[:count], None
        self.head_replays += 1
        self.rows_sampled_in_graph += sum(not truncates([p]) for p in params_list)
        return None, self.head.redraw_truncated(self.dispatch, GRAPH_CASE, sampled, params_list, draw_indices)

    def _tables(self, size: int) -> StepTables:
        rows, lengths, starts = self.rows_lengths_starts[:, :size]
        return StepTables(block_table=self.block_table[:size], rows=rows, lengths=lengths, starts=starts,
                          write_slots=self.write_slots[:size], max_length=1)

    def _fill(self, token_ids, segments, size: int) -> None:
        """Copy the real rows' inputs and tables in, the padding rows' after them, through
        pinned buffers (asynchronous: no wait on the device); the block table only when the
        rows' sequences or the cache's tables changed; token ids on the device copied there."""
        count, paged, staging = len(segments), self.cache.paged, self._staging.next()
        pad_block = paged.scratch_block
        tables = [paged.block_tables[s.seq_id] for s in segments] + [[pad_block]] * (size - count)
        starts = [s.start for s in segments] + [0] * (size - count)
        longs, ints = staging["longs"][:3 * size].view(3, size), staging["ints"][:3 * size].view(3, size)
        on_device = torch.is_tensor(token_ids)
        longs[0, :count] = 0 if on_device else torch.tensor(token_ids, dtype=torch.long)
        longs[0, count:] = 0
        longs[1] = torch.tensor(starts, dtype=torch.long)
        longs[2] = torch.tensor([paged.slot(table, p) for table, p in zip(tables, starts)], dtype=torch.long)
        ints[0] = torch.arange(size, dtype=torch.int32)
        ints[1] = 1
        ints[2] = longs[1]
        self.tokens[:size].copy_(longs[0], non_blocking=True)
        if on_device:
            self.tokens[:count].copy_(token_ids)
        self.positions[:size].copy_(longs[1], non_blocking=True)
        self.write_slots[:size].copy_(longs[2], non_blocking=True)
        self.rows_lengths_starts[:, :size].copy_(ints, non_blocking=True)
        key = (tuple(s.seq_id for s in segments), size, paged.version)
        if key != self._table_key:
            width = max(map(len, tables))  # entries past a sequence's blocks are never read
            host_table = staging["table"][:size * width].view(size, width)
            host_table.copy_(torch.tensor([table + [pad_block] * (width - len(table)) for table in tables],
                                          dtype=torch.int32))
            self.block_table[:size, :width].copy_(host_table, non_blocking=True)
            self._table_key = key

    def _capture(self, size: int):
        """Warm up (Triton compiles, cuBLAS picks) and capture one forward over dummy rows."""
        dummy = tuple(Segment(-1 - row, 0, 1, row, GRAPH_CASE) for row in range(size))
        self._fill_dummy(size)
        batch = TokenBatch(self.tokens[:size], dummy, GRAPH_CASE, position_ids=self.positions[:size])
        self.cache.paged.use_step_tables(dummy, self._tables(size))
        with ExitStack() as serving:
            self.mamba.serve(dummy, size, serving)
            draw = tensor_draw(self.dispatch, GRAPH_CASE)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.inference_mode():
                for _ in range(2):
                    warm = self.model(batch, self.dispatch, self.cache)
                    if draw is not None:
                        self.head.capture(self.model, self.dispatch, GRAPH_CASE, warm, draw)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool), torch.inference_mode():
                hidden = self.model(batch, self.dispatch, self.cache)
                sampled = None if draw is None else self.head.capture(self.model, self.dispatch, GRAPH_CASE,
                                                                      hidden, draw)
            settles = self.mamba.recorded_settles()
        self._pool = graph.pool()
        self._table_key = None  # the dummy rows' tables are in the buffers now
        return graph, hidden, sampled, settles

    def _fill_dummy(self, size: int) -> None:
        """Every row a one-token sequence at position 0 in the scratch block."""
        paged = self.cache.paged
        self.tokens[:size].fill_(0)
        self.positions[:size].fill_(0)
        self.write_slots[:size].fill_(paged.scratch_block * paged.block_size)
        self.block_table[:size].fill_(paged.scratch_block)
        self.rows_lengths_starts[0, :size].copy_(torch.arange(size, dtype=torch.int32))
        self.rows_lengths_starts[1, :size].fill_(1)
        self.rows_lengths_starts[2, :size].fill_(0)
