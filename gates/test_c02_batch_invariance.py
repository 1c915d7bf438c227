"""Gate C02: batch invariance.

Passes when, in every case of the model's cut (and of its quantized cut where one ships), each probe sequence's rows of every region
output (all region calls, lm_head, logprob and sampler included, captured through a
RegionDispatch observer) computed in batches of other random sequences, at a random place,
with 2 to 128 rows in all (64 one-token decodes at most; primes, powers of two and the
largest affordable; the probe alone is the 1-row end), equal bit for bit the same rows
computed with the probe alone; on the CPU the probe alone runs on 1 intra-op thread and the
batches on at least 2 (an engine's and a trainer's pools may differ); and the decode probes'
contexts end on either side of the contract's key block and the config's SSM chunk and run
past two key blocks (gates/boundaries.py; else vacuous, recorded as `coverage`).
Negative control: the fast contract fails it, and so does the consistent contract with every
linear region mapped to linear.fast_split_k (split-K below 64 rows only) or to
linear.planted_thread_split_k (a reduction split per intra-op thread); decode probes that cross
no boundary (BITWISE_C02_DECODE_HISTORIES) fail it as vacuous.

What a batch is, per case (each batch runs wholly in its case; mixed steps are C03's):
engine_prefill, prompt chunks (the probes: a 1-token prompt, a 7-token chunk starting at 12,
a 21-token prompt) among chunks of other sequences, some past position 0; engine_decode and
engine_graph, one-token decodes (eight probes: two short ones, then either side of the first
SSM chunk and key block boundaries, and past the second key block) among decodes of others
(engine_graph is its contract binding run eagerly on CPU); trainer_fwd and trainer_bwd,
whole sequences packed from position 0 (forward bits only). Histories are prefilled once into a TransientCache
and every batch runs on a copy of it, so a probe meets identical state alone and in a batch.
"""
import copy
import os
import random

import torch

from gates import device
from gates.boundaries import coverage, key_block, ssm_chunk
from gates.case_calls import intra_op_threads, thread_counts
from gates.compare import first_bit_difference
from gates.inputs import BATCH_SIZES, fresh_seed
from gates.subject import parametrize_sizes, subject_config, subject_label, subject_model
from kernels.contract import load_contract
from kernels.models.batch import TokenBatch
from kernels.models.dispatch import RegionDispatch
from kernels.models.state import TransientCache
from kernels.ops.sampler import SamplingParams

# Each case and the kind of batch it runs (engine_graph: the decode shapes, eagerly on CPU).
KIND = {"engine_prefill": "prefill", "engine_decode": "decode", "engine_graph": "decode",
        "trainer_fwd": "trainer", "trainer_bwd": "trainer"}
# Probes per kind of case: (history already in the cache, rows in the batch).
# Decode probes are one row each, so there are more of them: a fault that moves a bf16 output
# only now and then (split-K's fp32 partials, rounded) must still show in some probe's rows.
# Their histories follow the contract's key block and the config's SSM chunk (decode_probes).
FIXED_PROBES = {"prefill": ((0, 1), (12, 7), (0, 21)), "trainer": ((0, 1), (0, 7), (0, 21))}
# tests set it (e.g. "1,2") to show that probes crossing no boundary fail as vacuous
HISTORIES = os.environ.get("BITWISE_C02_DECODE_HISTORIES")
MAX_ROWS = {"prefill": 128, "decode": 64, "trainer": 128}
WHOLE_REGIONS = ("weight_quant",)  # outputs are weights, not rows
POOL_SIZE, MAX_HISTORY, MAX_PIECE = 64, 10, 16
PROBE_SEQ, POOL_SEQ = 1000, 2000


def decode_probes(block: int, chunk: int) -> tuple:
    """One-row decode probes whose contexts end on either side of the first SSM chunk and key
    block boundaries and past the second key block, plus two short ones."""
    histories = [int(h) for h in HISTORIES.split(",")] if HISTORIES else [
        1, 8, chunk - 1, chunk, block - 1, block, block + 1, 2 * block + 1]
    return tuple((h, 1) for h in dict.fromkeys(histories))


def probes_for(contract, config) -> dict:
    return {**FIXED_PROBES, "decode": decode_probes(key_block(contract), ssm_chunk(config))}


class Capture:
    """Observer: (region, layer, output) of every region call of one forward."""

    def __init__(self):
        self.calls = []

    def __call__(self, call):
        output = call.output
        self.calls.append((call.region, call.layer, output if isinstance(output, tuple) else (output,)))


def _forward(model, contract, case, pieces, cache, sampling_seeds):
    """(batch, region calls) of one forward over `pieces`, logits, logprob and sampler too."""
    capture = Capture()
    dispatch = RegionDispatch(contract, [capture])
    batch = TokenBatch.from_sequences(pieces, case, device=device.target())
    with torch.no_grad():
        logits = model.logits(model(batch, dispatch, cache), dispatch, case)
        dispatch("logprob", case, None, logits, batch.tokens, torch.ones(batch.tokens.shape[0], device=device.target()))
        params = [SamplingParams(1.0, top_k=50, seed=sampling_seeds[s.seq_id])
                  for s in batch.segments for _ in range(s.length)]
        dispatch("sampler", case, None, logits, params, batch.positions.tolist())
    return batch, capture.calls


def _rows_of(batch, calls, index: int) -> dict:
    """{(region, layer, n): [tensors]}: segment `index`'s rows of every region output."""
    segment = batch.segments[index]
    counts, rows = {}, {}
    for region, layer, outputs in calls:
        n = counts[(region, layer)] = counts.get((region, layer), -1) + 1
        tensors = [t for t in outputs if isinstance(t, torch.Tensor)]
        if region in WHOLE_REGIONS:
            rows[(region, layer, n)] = [t.clone() for t in tensors]
        else:
            rows[(region, layer, n)] = [t[segment.rows].clone() for t in tensors]
    return rows


class World:
    """The sequences of one case: probes, a pool of companions, their prefilled histories."""

    def __init__(self, model, contract, case, rng, probes):
        self.model, self.contract, self.case, self.kind = model, contract, case, KIND[case]
        vocab = model.config.vocab_size
        self.tokens = lambda n: [rng.randrange(1, vocab) for _ in range(n)]
        self.probes = [(PROBE_SEQ + i, history, self.tokens(history + length))
                       for i, (history, length) in enumerate(probes[self.kind])]
        least = {"trainer": 0, "prefill": 0, "decode": 1}[self.kind]  # a decode follows a prompt
        most = 0 if self.kind == "trainer" else MAX_HISTORY
        self.pool = [(POOL_SEQ + j, rng.randint(least, most)) for j in range(POOL_SIZE)]
        seq_ids = [probe[0] for probe in self.probes] + [seq for seq, _ in self.pool]
        self.seeds = {seq: rng.randrange(2**31) for seq in seq_ids}  # sampler seed per sequence
        self.cache = TransientCache.for_case(model.config, case)
        history = [(seq, 0, ids[:h]) for seq, h, ids in self.probes if h] + [
            (seq, 0, self.tokens(h)) for seq, h in self.pool if h]
        if history:  # prefilled once; every batch runs on a copy
            _forward(model, contract, "engine_prefill", history, self.cache, self.seeds)

    def run(self, pieces):
        return _forward(self.model, self.contract, self.case, pieces, copy.deepcopy(self.cache), self.seeds)

    def probe_piece(self, index):
        seq, history, ids = self.probes[index]
        return seq, history, ids[history:]

    def companions(self, num_rows, rng):
        """Pieces of pool sequences filling num_rows rows (one row each when decoding)."""
        pieces, left = [], num_rows
        for seq, history in self.pool:
            if not left:
                break
            size = 1 if self.kind == "decode" else rng.randint(1, min(left, MAX_PIECE))
            size = left if seq == self.pool[-1][0] and self.kind != "decode" else size
            pieces.append((seq, history, self.tokens(size)))
            left -= size
        if left:
            raise ValueError(f"pool of {POOL_SIZE} cannot fill {num_rows} rows")
        return pieces


class Tally:
    """What the comparisons of one case found: counts, regions, the first difference."""

    def __init__(self):
        self.num_comparisons, self.num_differing, self.first_difference = 0, 0, None
        self.regions, self.differing_regions = set(), {}

    def compare(self, alone: dict, batched: dict, where: dict) -> None:
        for key, expected in alone.items():
            got = batched.get(key, [])
            self.num_comparisons += 1
            self.regions.add(key[0])
            found = "missing in the batch" if len(got) != len(expected) else next(
                (d for a, b in zip(expected, got) for d in [_difference(a, b)] if d is not None), None)
            if found is None:
                continue
            self.num_differing += 1
            self.differing_regions[key[0]] = self.differing_regions.get(key[0], 0) + 1
            if self.first_difference is None:
                self.first_difference = {**where, "region": key[0], "layer": key[1], "call": key[2],
                                         "detail": str(found), **_bit_figures(found)}

    def figures(self) -> dict:
        return {"num_comparisons": self.num_comparisons, "num_differing": self.num_differing,
                "differing_regions": self.differing_regions, "regions_compared": sorted(self.regions),
                "first_difference": self.first_difference}


def _difference(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {tuple(a.shape)}/{a.dtype} vs {tuple(b.shape)}/{b.dtype}"
    return first_bit_difference(a, b)


def _bit_figures(found) -> dict:
    if isinstance(found, str):
        return {}
    return {"element": list(found.index), "alone_value": found.left, "batch_value": found.right,
            "alone_bits": found.left_bits, "batch_bits": found.right_bits, "ulps": found.ulps}


def _check_case(gate, model, contract, case, seed, size, probes):
    rng = random.Random(seed)
    world = World(model, contract, case, rng, probes)
    kind = world.kind
    alone_threads, batch_threads = thread_counts()
    alone = {}
    for index in range(len(world.probes)):
        with intra_op_threads(alone_threads):
            batch, calls = world.run([world.probe_piece(index)])
        alone[index] = _rows_of(batch, calls, 0)
    sizes = [n for n in BATCH_SIZES if 1 < n <= MAX_ROWS[kind]]
    tally = Tally()
    batches_per_probe = [0] * len(world.probes)
    for num_rows in sizes:
        order, chosen, used = list(range(len(world.probes))), [], 0
        rng.shuffle(order)
        for index in order:
            length = len(world.probe_piece(index)[2])
            if used + length <= num_rows:
                chosen.append(index)
                used += length
        pieces = world.companions(num_rows - used, rng) + [world.probe_piece(i) for i in chosen]
        rng.shuffle(pieces)
        with intra_op_threads(batch_threads):
            batch, calls = world.run(pieces)
        for index in chosen:
            batches_per_probe[index] += 1
            position = next(k for k, s in enumerate(batch.segments) if s.seq_id == world.probes[index][0])
            where = {"case": case, "batch_rows": num_rows, "num_segments": len(pieces),
                     "probe": list(probes[kind][index]), "probe_first_row": batch.segments[position].row}
            tally.compare(alone[index], _rows_of(batch, calls, position), where)
    gate.check(f"[{size}] {case}: probe rows equal alone and in batches of {sizes[0]}..{sizes[-1]} rows",
               tally.num_differing == 0 and min(batches_per_probe) > 0,
               batch_rows=sizes, batches_per_probe=batches_per_probe,
               intra_op_threads={"alone": alone_threads, "batches": batch_threads}, **tally.figures())
    return sizes


pytest_generate_tests = parametrize_sizes  # cut, and cut-quant (FP8 KV, quantized weights) where shipped


def test_rows_do_not_depend_on_the_batch(gate, size):
    config = subject_config(gate, size)
    contract = load_contract(gate.contract)
    model_seed = fresh_seed() % 1000
    model = subject_model(gate, config, model_seed).requires_grad_(False).to(device.target())
    probes = probes_for(contract, config)
    crossed = coverage([history + 1 for history, _ in probes["decode"]], key_block(contract), ssm_chunk(config))
    gate.inputs = {"config": subject_label(gate, size), "model_seed": model_seed,
                   "probes": {kind: [list(p) for p in kind_probes] for kind, kind_probes in probes.items()},
                   "coverage": crossed, "seeds": {}, "batch_rows": {}}
    has_ssm = hasattr(config, "chunk_size")
    gate.check(f"[{size}] decode probes end either side of a key block{' and an SSM chunk' if has_ssm else ''} "
               f"and past two key blocks (else vacuous)",
               crossed["either_side_of_a_key_block"] and crossed["key_blocks_crossed"] >= 2
               and (crossed["either_side_of_an_ssm_chunk"] or not has_ssm), **crossed)
    for case in KIND:
        seed = fresh_seed()
        gate.inputs["seeds"][case] = seed
        gate.inputs["batch_rows"][case] = _check_case(gate, model, contract, case, seed, size, probes)
    gate.verdict()
