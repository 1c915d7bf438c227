"""The rollout engine: its own model, a paged KV cache, continuous batching, a seeded sampler.

A step is one forward over a flat batch of prefill chunks and decode tokens; every sampled token
comes back with its log-prob. Token-parallel regions run in case engine_decode when the step holds
only decodes, engine_prefill otherwise, and each segment's attention in its own phase's case; with
cuda_graphs a decode-only step replays a graph (engine_graph). Look-ahead: look_ahead.py.
"""
from collections import Counter

import torch

from kernels.contract.dispatch import make_dispatch
from kernels.contract.identity import identities
from kernels.engine.cache import EngineCache, PagedKVCache
from kernels.engine.look_ahead import Launched, adopt, draw_index, next_step_is_known
from kernels.engine.pinned import ResultCopies
from kernels.engine.request import Completion, Request, RunningSequence
from kernels.engine.scheduler import ScheduledWork, Scheduler
from kernels.layout.groups import comm_fingerprint
from kernels.models.batch import Segment, TokenBatch
from kernels.models.registry import build_model
from kernels.ops.transfer import to_device

PHASE_CASE = {"prefill": "engine_prefill", "decode": "engine_decode"}


class Engine:
    """Generates completions with log-probs; `load_weights` is the trainer's weight sync."""

    def __init__(self, config, contract, state_dict=None, *, num_blocks=256, block_size=16,
                 max_tokens_per_step=64, max_running=16, observers=(), device="cpu", parallel=None,
                 cuda_graphs=False, look_ahead=None):
        """`parallel`: this rank's LayoutGroups (kernels/layout/) when the engine runs in a
        TP/EP layout; None: one process. `cuda_graphs`: replay decode steps from CUDA graphs
        (kernels/engine/graphs.py; CUDA only, one process; ValueError else). `look_ahead`:
        launch the next decode step before this one's results are on the host (module
        docstring); default: with cuda_graphs and no observers. Observers see every row
        in launch order, so they refuse it (ValueError)."""
        if look_ahead and observers:
            raise ValueError("look_ahead: observers trace rows in launch order; run them without it")
        contract.require_regions(config.REGIONS)
        self.config = config
        self.device = torch.device(device)
        self.model = build_model(config, seed=0 if state_dict is None else None).to(self.device)
        if state_dict is not None:
            self._copy_weights(state_dict)
        self.model.requires_grad_(False)
        self.parallel, self.comm = parallel, comm_fingerprint(parallel)
        self.dispatch = make_dispatch(contract, observers, parallel, config=config, side="engine")
        self.cache = EngineCache(PagedKVCache(
            num_layers=config.num_layers, num_blocks=num_blocks, block_size=block_size,
            num_kv_heads=config.num_kv_heads, head_dim=config.head_dim, dtype=config.torch_dtype,
            kv_format=config.kv_cache_dtype, device=self.device))
        self.scheduler = Scheduler(self.cache, max_tokens_per_step=max_tokens_per_step,
                                   max_running=max_running)
        self.step_count = 0
        self.graphs = self._decode_graphs(cuda_graphs, max_running)
        self.look_ahead = bool(cuda_graphs and not observers) if look_ahead is None else look_ahead
        self.steps_launched_ahead = 0
        """Decode steps launched before the step before them was collected."""
        self.rows_dropped = 0
        """Rows of steps launched ahead whose sequence had ended on its stop token."""
        self._results = ResultCopies(max_running)
        self._ahead: Launched | None = None
        self.replays_cuda_graphs = self.graphs is not None
        """True when decode steps replay captured CUDA graphs: the region doors' Python does
        not run then, so a tracer must refuse."""
        self.weight_version = 0
        self.step_phases = Counter()
        """How many steps held which phases: ("decode",), ("prefill",), ("decode", "prefill")."""
        self._pending: list = []

    def _decode_graphs(self, wanted: bool, max_running: int):
        if not wanted:
            return None
        from kernels.engine.graphs import DecodeGraphs, graphs_unsupported  # CUDA graphs: GPU engines
        reason = graphs_unsupported(self.config, self.parallel)
        if reason:
            raise ValueError(f"cuda_graphs: {reason}")
        return DecodeGraphs(self.model, self.dispatch, self.cache, max_running, self.device)

    def load_weights(self, state_dict) -> None:
        """Weight sync: copy bit-exact, drop all cached KV, recompute running sequences (a
        step launched ahead ran on the old weights: it is dropped, its rows recomputed)."""
        if self._ahead is not None:
            ResultCopies.wait(self._ahead.ticket)
            self._ahead = None
        self._copy_weights(state_dict)
        self.weight_version += 1
        self.cache.clear()
        for sequence in self.scheduler.running:
            sequence.num_computed = 0
            request = sequence.request
            self.cache.reserve(request.request_id, len(request.prompt) + request.max_new_tokens)

    def _copy_weights(self, state_dict) -> None:
        own = self.model.state_dict()
        if set(own) != set(state_dict):
            raise ValueError(f"weight sync: names differ: {sorted(set(own) ^ set(state_dict))}")
        for name, tensor in own.items():
            incoming = state_dict[name]
            if incoming.shape != tensor.shape or incoming.dtype != tensor.dtype:
                raise ValueError(f"weight sync: {name} is {tuple(incoming.shape)}/{incoming.dtype}, "
                                 f"the engine holds {tuple(tensor.shape)}/{tensor.dtype}")
        with torch.no_grad():
            for name, tensor in own.items():
                tensor.copy_(state_dict[name])

    def identities(self) -> dict:
        """semantic / numerical_policy / deployment digests (C0 compares them with the trainer's)."""
        return identities(self.config, self.model.state_dict(), self.dispatch.contract, **self.comm)

    def add_request(self, request: Request) -> None:
        """Queue a request; ValueError if its id is in use or it could never fit the cache."""
        in_use = {s.request.request_id for s in self._sequences()}
        if request.request_id in in_use:
            raise ValueError(f"request id {request.request_id} is already in the engine")
        length = len(request.prompt) + request.max_new_tokens
        limit = getattr(self.config, "max_position", None)
        if limit is not None and length > limit:
            raise ValueError(f"request {request.request_id} reaches position {length - 1}; "
                             f"{self.config.family} has positions below {limit}")
        needed = self.cache.blocks_needed(length)
        if needed > self.cache.num_blocks:
            raise ValueError(f"request {request.request_id} needs {needed} KV blocks; "
                             f"the cache has {self.cache.num_blocks}")
        self._pending.append(RunningSequence(Completion(request, device=str(self.device))))

    def _sequences(self) -> list:
        return self._pending + list(self.scheduler.waiting) + self.scheduler.running

    def has_work(self) -> bool:
        return bool(self._pending or self.scheduler.waiting or self.scheduler.running or self._ahead)

    def step(self) -> list:
        """One engine step; returns the completions that finished in it."""
        arrived = [s for s in self._pending if s.request.arrival_step <= self.step_count]
        self._pending = [s for s in self._pending if s.request.arrival_step > self.step_count]
        self.scheduler.waiting.extend(sorted(arrived, key=lambda s: s.request.arrival_step))
        launched, self._ahead = self._adopt_ahead(), None
        work = launched.items if launched else self.scheduler.schedule()
        self.step_count += 1
        if not work:
            return []
        self.step_phases[tuple(sorted({item.phase for item in work}))] += 1
        if launched is None:
            launched = self._launch(work)
        if launched is not None and self._may_look_ahead(work, launched):
            self._ahead = self._launch([ScheduledWork(item.sequence, 1, "decode") for item in work], launched.tokens)
            self.steps_launched_ahead += 1
        return self._collect(launched) if launched else []

    def _adopt_ahead(self) -> "Launched | None":
        ahead = adopt(self._ahead)
        if self._ahead is not None:
            self.rows_dropped += len(self._ahead.items) - (len(ahead.items) if ahead else 0)
        return ahead

    def _may_look_ahead(self, work, launched) -> bool:
        return self.look_ahead and next_step_is_known(work, launched, self.scheduler, self._pending,
                                                      self.step_count)

    def _launch(self, work, device_tokens=None) -> "Launched | None":
        """Run one step's forward and sampler on the device (token ids from `device_tokens`
        when launched ahead); its results' copy to the host started; None if no row samples."""
        segments, token_ids, case = self._layout(work, device_tokens)
        with torch.inference_mode():
            if case == "engine_graph":  # every decode row samples
                hidden, sampled = self.graphs.launch(segments, token_ids, *self._sampling(work))
            else:
                ids = token_ids if device_tokens is not None else torch.tensor(token_ids, dtype=torch.long,
                                                                                 device=self.device)
                hidden, sampled = self.model(TokenBatch(ids, segments, case), self.dispatch, self.cache), None
            sample = (work, *sampled, None) if sampled is not None else self._sample(work, segments, case, hidden)
        for item in work:
            item.sequence.num_computed += item.num_tokens
        if sample is None:
            return None
        items, tokens, logprobs, full = sample
        return Launched(items, tokens, self._results.start(tokens, logprobs), full)

    def _collect(self, launched) -> list:
        """Wait for a launched step's results, record them; the completions that finished."""
        tokens, logprobs = ResultCopies.wait(launched.ticket)
        full, rows = launched.full, launched.rows
        if rows is not None:
            tokens, logprobs = [tokens[i] for i in rows], [logprobs[i] for i in rows]
            full = None if full is None else full[rows]
        return self._record(launched.items, tokens, logprobs, full)

    def generate(self, requests, after_step=None) -> list:
        """Run requests (honouring their arrival steps) to completion; results in input order.
        `after_step()`, if given, is called after every step (a clock's hook)."""
        for request in requests:
            self.add_request(request)
        done = {}
        while self.has_work():
            for completion in self.step():
                done[completion.request.request_id] = completion
            if after_step is not None:
                after_step()
        return [done[request.request_id] for request in requests]

    def _layout(self, work, device_tokens=None) -> tuple:
        """(segments, token ids, case) of one step's rows; the ids are `device_tokens` when
        given (a step launched ahead, whose last tokens are not on the host yet)."""
        segments, tokens, row = [], [], 0
        all_decode = all(item.phase == "decode" for item in work)
        # a replayed decode step runs in the graph case, its segments and head regions too
        graphed = all_decode and self.graphs is not None and len(work) <= self.graphs.sizes[-1]
        for item in work:
            sequence = item.sequence
            if device_tokens is None:
                tokens.extend(sequence.tokens_between(sequence.num_computed, sequence.num_computed + item.num_tokens))
            segments.append(Segment(sequence.request.request_id, sequence.num_computed, item.num_tokens, row,
                                    "engine_graph" if graphed else PHASE_CASE[item.phase]))
            row += item.num_tokens
        case = "engine_graph" if graphed else "engine_decode" if all_decode else "engine_prefill"
        return tuple(segments), tokens if device_tokens is None else device_tokens, case

    def _sampling(self, items) -> tuple:
        """(params, draw indices, whether any wants full rows) of the items that sample,
        before their rows are counted computed."""
        params = [item.sequence.request.params for item in items]
        draws = [draw_index(item.sequence) + item.num_tokens for item in items]
        return params, draws, any(item.sequence.request.return_full_logprobs for item in items)

    def _sample(self, work, segments, case: str, hidden):
        """(items, tokens [R], log-probs [R], full rows or None) on the device for every
        sequence whose rows of this step reach its known tokens (a step launched ahead goes
        one past them); None when no row samples."""
        chosen = [(item, segment) for item, segment in zip(work, segments)
                  if item.sequence.num_computed + item.num_tokens >= item.sequence.num_tokens]
        if not chosen:
            return None
        items = [item for item, _ in chosen]
        rows = to_device(torch.tensor([segment.row + segment.length - 1 for _, segment in chosen]), self.device)
        params, draws, wants_full = self._sampling(items)
        temperatures = to_device(torch.tensor([p.logprob_temperature for p in params], dtype=torch.float32),
                                 self.device)
        with self.dispatch.selecting_rows(rows):
            logits = self.model.logits(hidden[rows], self.dispatch, case)
            tokens = self.dispatch("sampler", case, None, logits, params, draws)
            logprobs = self.dispatch("logprob", case, None, logits, tokens, temperatures)
            full = (self.dispatch("logprob", case, None, logits, tokens, temperatures, full=True)
                    if wants_full else None)
        return items, tokens, logprobs, full

    def _record(self, items, tokens: list, logprobs: list, full=None) -> list:
        """Append each sampled row to its completion; the completions that finished."""
        finished = []
        for index, item in enumerate(items):
            completion = item.sequence.completion
            completion.tokens.append(tokens[index])
            completion.logprobs.append(logprobs[index])
            if full is not None and completion.request.return_full_logprobs:
                completion.full_logprobs.append(full[index].clone())
            if item.sequence.is_finished:
                self.scheduler.finish(item.sequence)
                finished.append(completion)
        return finished
