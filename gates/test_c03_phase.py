"""Gate C03: phase consistency.

Passes when, per token of random sequences on the model's cut (and on its quantized cut
with FP8 KV where one exists), chunked prefill at several chunk sizes, token-by-token decode
and trainer_fwd each give the same bits as full prefill for the final hidden state, the
logits and every layer's attention and ssm_scan output, and the real Engine (paged KV cache,
continuous batching with chunked prompts mixed with decodes) gives the same bits as
trainer_fwd for the same tokens. Negative control: the fast contract fails it, and so does
the consistent contract with the decode case only remapped to a kernel that does not re-play
prefill's arithmetic (attention.fast_split_kv on qwen3, ssm_scan.fast_recurrent on nemotron).

The phases run through the model API with a TransientCache, the trainer's cache (its KV
keeps decode(encode(k)) under FP8 KV, the bits the paged store reads back): full prefill is
one engine_prefill forward from position 0; chunked prefill forwards segments starting at
c, 2c, ... (c = 5 and Q-1, Q, Q+1 for the SSM chunk Q, so chunks end before, at and after a
chunk boundary); decode is a 1-token prompt, then one engine_decode step per token; all
sequences of a phase share its forwards (batch invariance itself is C02's). The longest
sequence runs past KEY_BLOCKS_CROSSED of the widest key block the contract's attention pins
(block_kv, tokens_per_split); the coverage record says which key blocks and SSM chunks the
probes crossed, and fewer than 2 of either fails the gate as vacuous.
"""
import os
import random

import torch

from gates import device
from gates.boundaries import coverage, key_block, ssm_chunk
from gates.compare import first_bit_difference
from gates.inputs import fresh_seed
from gates.subject import parametrize_sizes, subject_config, subject_label, subject_model
from gates.workload import Workload, make_requests
from kernels.contract import load_contract
from kernels.engine.engine import Engine
from kernels.models.batch import Segment, TokenBatch
from kernels.models.dispatch import RegionDispatch
from kernels.models.state import TransientCache

REGIONS = ("attention", "ssm_scan")  # per-sequence regions whose rows are compared per token
NUM_SEQUENCES, MIN_LENGTH = 2, 17
# the longest sequence runs past this many of the attention's key blocks (tests set 0: vacuous)
KEY_BLOCKS_CROSSED = int(os.environ.get("BITWISE_C03_KEY_BLOCKS", "3"))
ENGINE_TOKENS_PER_STEP, ENGINE_BLOCK_SIZE = 12, 16


pytest_generate_tests = parametrize_sizes  # cut, and cut-quant where shipped


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


def _order(key) -> tuple:
    """Computation order: per-layer regions by layer, then the final hidden state, then logits."""
    quantity, seq = key
    layer = int(quantity.rpartition("@layer")[2]) if "@layer" in quantity else None
    return (layer if layer is not None else 10**6 + ("logits" == quantity), seq)


def _compare(expected: dict, got: dict) -> dict:
    """Figures: tensors and positions compared, the quantities that differ, and the first
    difference in computation order (None when every bit agrees)."""
    figures = {"num_tensors": len(expected), "quantities": sorted({q for q, _ in expected}),
               "num_positions": sum(t.shape[0] for (q, _), t in expected.items() if q == "hidden"),
               "differing": [], "first_difference": None}
    for key in sorted(expected, key=_order):
        (quantity, seq), reference, other = key, expected[key], got.get(key)
        if other is None or other.shape != reference.shape:
            found = {"detail": "missing" if other is None else
                     f"shape {tuple(other.shape)} vs {tuple(reference.shape)}"}
        else:
            difference = first_bit_difference(reference, other)
            found = difference and {
                "position": difference.index[0], "element": list(difference.index),
                "reference": difference.left, "value": difference.right, "ulps": difference.ulps,
                "reference_bits": difference.left_bits, "value_bits": difference.right_bits,
                "num_differing": difference.num_differing, "detail": str(difference)}
        if found:
            figures["differing"] = sorted(set(figures["differing"]) | {quantity})
            figures["first_difference"] = (figures["first_difference"]
                                           or {"quantity": quantity, "sequence": seq, **found})
    return figures


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


def test_every_phase_gives_the_same_bits(gate, size):
    name = subject_label(gate, size)
    config, contract = subject_config(gate, size), load_contract(gate.contract)
    seed = fresh_seed()
    rng = random.Random(seed)
    model = subject_model(gate, config, seed % 1000).requires_grad_(False).to(device.target())
    block, chunk = key_block(contract), ssm_chunk(config)
    longest = KEY_BLOCKS_CROSSED * block + rng.randint(1, max(1, block // 2))
    lengths = [longest] + [rng.randint(MIN_LENGTH, max(MIN_LENGTH, 2 * block)) for _ in range(NUM_SEQUENCES - 1)]
    tokens = [[rng.randrange(1, config.vocab_size) for _ in range(n)] for n in lengths]
    chunk_sizes = (5, chunk - 1, chunk, chunk + 1)
    crossed = coverage(lengths, block, chunk)
    gate.inputs = {"config": name, "seed": seed, "model_seed": seed % 1000, "lengths": lengths,
                   "chunk_sizes": list(chunk_sizes), "kv_cache_dtype": config.kv_cache_dtype, "coverage": crossed}
    has_ssm = hasattr(config, "chunk_size")
    gate.check(f"[{size}] the probes cross 2+ key blocks{' and SSM chunks' if has_ssm else ''} (else vacuous)",
               crossed["key_blocks_crossed"] >= 2 and (crossed["ssm_chunks_crossed"] >= 2 or not has_ssm), **crossed)
    full = _run_phase(model, contract, phase_steps(tokens))
    phases = [(f"chunked prefill, chunks of {c}", phase_steps(tokens, chunk_size=c)) for c in chunk_sizes]
    phases.append(("token-by-token decode", phase_steps(tokens, decode=True)))
    trainer_steps = [("trainer_fwd", "trainer_fwd", [(s, 0, ids) for s, ids in enumerate(tokens)])]
    phases.append(("trainer_fwd", trainer_steps))
    for phase, steps in phases:
        figures = _compare(full, _run_phase(model, contract, steps))
        gate.check(f"[{size}] {phase} == full prefill", figures["first_difference"] is None,
                   num_forwards=len(steps), **figures)
    engine_rows, engine_tokens, facts = _engine_run(config, contract, model, seed)
    reference = _run_phase(model, contract, [("trainer_fwd", "trainer_fwd",
                                              [(s, 0, ids[:-1]) for s, ids in enumerate(engine_tokens)])])
    gate.inputs["engine"] = {"sequence_lengths": [len(t) for t in engine_tokens], **facts}
    figures = _compare(reference, engine_rows)
    gate.check(f"[{size}] engine (paged KV, {config.kv_cache_dtype}) == trainer_fwd",
               figures["first_difference"] is None, **figures)
    gate.check(f"[{size}] the engine chunked prompts and mixed prefill with decode",
               facts["mixed_steps"] > 0 and facts["chunks_past_position_0"] > 0, **facts)
    gate.verdict()
