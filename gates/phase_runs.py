"""C03's phases, as its worker computes them (gates/candidate.py): per token of random sequences,
the final hidden state, the logits and every layer's attention and ssm_scan output of each phase,
reduced to one sha256 per position's row. Phases (model API, the trainer's TransientCache): full
prefill; chunked prefill in chunks of 5 and Q-1, Q, Q+1 (Q the SSM chunk: ends before, at, after
its boundary); decode token by token; the real Engine (paged KV, prompt chunks mixed with decodes)
scored by trainer_fwd. The longest sequence crosses three key blocks and a block past any wider
constant the contract pins; a long probe (LONG_TOKENS, decoded at its end) meets a kernel that
changes its walk at a context the contract does not name (a hard-coded threshold).
"""
import random

import torch

from gates import device
from gates.boundaries import coverage, key_block, longest_constant, ssm_chunk, state_chunk
from gates.compare import tensor_digest
from gates.switches import switch
from gates.workload import Workload, make_requests
from kernels.contract.dispatch import RegionDispatch
from kernels.engine.engine import Engine
from kernels.models.batch import Segment, TokenBatch
from kernels.models.state import TransientCache

REGIONS = ("attention", "ssm_scan")  # per-sequence regions whose rows are compared per token
NUM_SEQUENCES, MIN_LENGTH = 2, 17
KEY_BLOCKS_VARIABLE = "BITWISE_C03_KEY_BLOCKS"  # tests set 0: the probes cross too little (vacuous)
ENGINE_TOKENS_PER_STEP, ENGINE_BLOCK_SIZE = 12, 16
# the long probe's length by device (past 1024 on the CPU, the power of two kernels most often
# switch at; past 4096 where a GPU affords it) and the tokens decoded at its end
LONG_TOKENS, LONG_DECODE = {"cpu": 1100, "cuda": 4100}, 8


class Recorder:
    """Observer plus forward bookkeeping: each segment's rows of the final hidden state,
    logits and REGIONS outputs, by (quantity, sequence) and start position."""

    def __init__(self):
        self.rows, self.batch, self.num_chunks = {}, None, 0

    def begin(self, batch) -> None:
        self.batch = batch
        self.num_chunks += sum(s.start > 0 and s.case == "engine_prefill" for s in batch.segments)

    def __call__(self, call) -> None:
        region, layer = call.region, call.layer
        if region in REGIONS:  # one call over a case's segments, rows numbered as they say
            segments = next(a for a in call.args if isinstance(a, tuple) and a and isinstance(a[0], Segment))
            for segment in segments:
                self._put(f"{region}@layer{layer}", segment, call.output[segment.rows])

    def end(self, hidden, logits) -> None:
        for segment in self.batch.segments:
            self._put("hidden", segment, hidden[segment.rows])
            self._put("logits", segment, logits[segment.rows])

    def _put(self, quantity, segment, rows) -> None:
        self.rows.setdefault((quantity, segment.seq_id), {})[segment.start] = rows.detach().clone()

    def sequences(self) -> dict:
        """{(quantity, seq): rows of positions 0.. in order}; ValueError on a gap."""
        joined = {}
        for key, by_start in self.rows.items():
            position, parts = 0, []
            for start in sorted(by_start):
                if start != position:
                    raise ValueError(f"{key}: rows from {position} missing (next start {start})")
                parts.append(by_start[start])
                position += by_start[start].shape[0]
            joined[key] = torch.cat(parts)
        return joined


def _run_phase(model, contract, steps) -> dict:
    """Forwards over steps [(batch case, segment case, pieces)] on one fresh cache."""
    recorder = Recorder()
    dispatch = RegionDispatch(contract, [recorder])
    cache = TransientCache.for_case(model.config, steps[0][0])
    with torch.no_grad():
        for batch_case, segment_case, pieces in steps:
            batch = TokenBatch.from_sequences(pieces, batch_case, segment_case, device=device.target())
            recorder.begin(batch)
            hidden = model(batch, dispatch, cache)
            recorder.end(hidden, model.logits(hidden, dispatch, batch_case))
    return recorder.sequences()


def phase_steps(tokens: list, chunk_size: int | None = None, decode: bool = False) -> list:
    """The forwards of one phase over sequences `tokens` (seq id = index)."""
    longest = max(map(len, tokens))

    def step(case, lo, size):
        return case, case, [(s, lo, ids[lo:lo + size]) for s, ids in enumerate(tokens) if lo < len(ids)]

    if decode:  # a one-token prompt, then one decode step per position
        return [step("engine_prefill", 0, 1)] + [step("engine_decode", t, 1) for t in range(1, longest)]
    size = chunk_size or longest
    return [step("engine_prefill", lo, size) for lo in range(0, longest, size)]


def _engine_run(config, contract, model, seed):
    """(recorded rows, the tokens each request ended with, engine facts) of one generate."""
    recorder = Recorder()
    workload = Workload(num_sequences=3, new_tokens=6, min_prompt_len=ENGINE_TOKENS_PER_STEP + 1,
                        max_prompt_len=30, arrival_spread=3, seed=seed)
    requests = make_requests(workload, config.vocab_size)
    engine = Engine(config, contract, model.state_dict(), block_size=ENGINE_BLOCK_SIZE,
                    num_blocks=3 * -(-(30 + 6) // ENGINE_BLOCK_SIZE),
                    max_tokens_per_step=ENGINE_TOKENS_PER_STEP, max_running=3, observers=[recorder],
                    device=device.target())
    engine.model.register_forward_pre_hook(lambda module, args: recorder.begin(args[0]))
    engine.model.register_forward_hook(lambda module, args, hidden: recorder.end(
        hidden, module.logits(hidden, engine.dispatch, args[0].case)))
    completions = engine.generate(requests)
    tokens = [list(c.request.prompt) + c.tokens for c in completions]
    facts = {"num_steps": engine.step_count, "mixed_steps": engine.step_phases[("decode", "prefill")],
             "chunks_past_position_0": recorder.num_chunks, "kv_cache_dtype": config.kv_cache_dtype,
             "block_size": ENGINE_BLOCK_SIZE, "tokens_per_step": ENGINE_TOKENS_PER_STEP}
    return recorder.sequences(), tokens, facts


def position_digests(rows: dict) -> dict:
    """{"quantity|seq": [sha256 of each position's row]} of a phase's recorded rows."""
    return {f"{quantity}|{seq}": [tensor_digest(row.cpu()) for row in tensor]
            for (quantity, seq), tensor in rows.items()}


def long_probe(model, contract, config, rng) -> dict:
    """{tokens, full, phases} of one LONG_TOKENS sequence (within the model's positions):
    whole prefill as the reference; prefill then LONG_DECODE decode steps; trainer_fwd."""
    wanted = LONG_TOKENS.get(device.target(), LONG_TOKENS["cpu"])
    length = min(wanted, getattr(config, "max_position", wanted))
    tokens = [[rng.randrange(1, config.vocab_size) for _ in range(length)]]
    prefix = length - LONG_DECODE
    decoded = [("engine_prefill", "engine_prefill", [(0, 0, tokens[0][:prefix])])] + [
        ("engine_decode", "engine_decode", [(0, t, tokens[0][t:t + 1])]) for t in range(prefix, length)]
    phases = [(f"long context ({length} tokens): prefill {prefix}, decode {LONG_DECODE}", decoded),
              (f"long context ({length} tokens): trainer_fwd", [("trainer_fwd", "trainer_fwd", [(0, 0, tokens[0])])])]
    return {"tokens": length, "full": position_digests(_run_phase(model, contract, phase_steps(tokens))),
            "phases": _digested(model, contract, phases)}


def _digested(model, contract, phases) -> list:
    """[{name, num_forwards, rows}] of phases [(name, steps)], each on its own fresh cache."""
    return [{"name": name, "num_forwards": len(steps), "rows": position_digests(_run_phase(model, contract, steps))}
            for name, steps in phases]


def every_phase(model, contract, config, seed: int) -> dict:
    """{inputs, full, phases: [{name, num_forwards, rows}], engine: {rows, reference, facts},
    long}: each phase's position digests under `seed`, the engine's beside trainer_fwd's, and
    the long probe's (long_probe)."""
    rng = random.Random(seed)
    block, chunk = key_block(contract), ssm_chunk(config)
    widest = longest_constant(contract)  # wider than the key block: a context threshold, crossed too
    past = max(switch(KEY_BLOCKS_VARIABLE) * block, widest + block if widest > block else 0)
    longest = past + rng.randint(1, max(1, block // 2))
    lengths = [longest] + [rng.randint(MIN_LENGTH, max(MIN_LENGTH, 2 * block)) for _ in range(NUM_SEQUENCES - 1)]
    tokens = [[rng.randrange(1, config.vocab_size) for _ in range(n)] for n in lengths]
    chunk_sizes = (5, chunk - 1, chunk, chunk + 1)
    phases = [(f"chunked prefill, chunks of {c}", phase_steps(tokens, chunk_size=c)) for c in chunk_sizes]
    phases.append(("token-by-token decode", phase_steps(tokens, decode=True)))
    phases.append(("trainer_fwd", [("trainer_fwd", "trainer_fwd", [(s, 0, ids) for s, ids in enumerate(tokens)])]))
    engine_rows, engine_tokens, facts = _engine_run(config, contract, model, seed)
    reference = _run_phase(model, contract, [("trainer_fwd", "trainer_fwd",
                                              [(s, 0, ids[:-1]) for s, ids in enumerate(engine_tokens)])])
    return {"inputs": {"lengths": lengths, "chunk_sizes": list(chunk_sizes), "kv_cache_dtype": config.kv_cache_dtype,
                       "coverage": coverage(lengths, block, chunk), "has_ssm": state_chunk(config) is not None},
            "full": position_digests(_run_phase(model, contract, phase_steps(tokens))),
            "phases": _digested(model, contract, phases),
            "engine": {"rows": position_digests(engine_rows), "reference": position_digests(reference),
                       "facts": {"sequence_lengths": [len(t) for t in engine_tokens], **facts}},
            "long": long_probe(model, contract, config, rng)}
