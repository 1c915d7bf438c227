"""C02's runs, as its worker computes them (gates/candidate.py): each probe sequence's rows of every
region output, alone and in batches of other random sequences, reduced to what the judge compares
(shape, dtype, sha256 of the rows' bytes, NaN count).
A batch runs wholly in one case (mixed steps are C03's): prompt chunks among others' chunks,
one-token decodes either side of the SSM chunk and key block boundaries (engine_graph run eagerly
on the CPU), whole packed sequences for the trainer (forward bits only). Every batch starts from a
copy of one prefilled TransientCache, so a probe meets identical state alone and in a batch; on
the CPU the probe alone runs on 1 intra-op thread and the batches on at least 2.
"""
import copy
import random

import torch

from gates import device
from gates.boundaries import key_block, ssm_chunk
from gates.case_calls import intra_op_threads, thread_counts
from gates.inputs import BATCH_SIZES
from gates.region_runs import summary
from gates.row_replay import RowCapture, replay
from gates.switches import switch
from kernels.contract.dispatch import RegionDispatch
from kernels.models.batch import TokenBatch
from kernels.models.state import TransientCache
from kernels.ops.sampler import SamplingParams

# Each case and the kind of batch it runs (engine_graph: the decode shapes, eagerly on CPU).
KIND = {"engine_prefill": "prefill", "engine_decode": "decode", "engine_graph": "decode",
        "trainer_fwd": "trainer", "trainer_bwd": "trainer"}
# Probes per kind of case: (history already in the cache, rows in the batch). Decode probes
# are one row each, so there are more of them: a fault that moves a bf16 output only now and
# then (split-K's fp32 partials, rounded) must still show in some probe's rows.
FIXED_PROBES = {"prefill": ((0, 1), (12, 7), (0, 21)), "trainer": ((0, 1), (0, 7), (0, 21))}
HISTORIES_VARIABLE = "BITWISE_C02_DECODE_HISTORIES"  # tests set it (e.g. "1,2") to show a vacuous run fails
MAX_ROWS = {"prefill": 128, "decode": 64, "trainer": 128}
WHOLE_REGIONS = ("weight_quant",)  # outputs are weights, not rows
POOL_SIZE, MAX_HISTORY, MAX_PIECE = 64, 10, 16
PROBE_SEQ, POOL_SEQ = 1000, 2000


def probes_for(contract, config) -> dict:
    """Probes per kind; the decode ones end on either side of the first SSM chunk and key
    block boundaries and past the second key block, plus two short ones."""
    block, chunk = key_block(contract), ssm_chunk(config)
    histories = switch(HISTORIES_VARIABLE)
    histories = [int(h) for h in histories.split(",")] if histories else [
        1, 8, chunk - 1, chunk, block - 1, block, block + 1, 2 * block + 1]
    return {**FIXED_PROBES, "decode": tuple((h, 1) for h in dict.fromkeys(histories))}


class Capture:
    """Observer: (region, layer, output, segment) of every region call of one forward (segment:
    the sequence a call works on alone, else None)."""

    def __init__(self):
        self.calls = []

    def __call__(self, call):
        output = call.output
        self.calls.append((call.region, call.layer, output if isinstance(output, tuple) else (output,),
                           call.segment))


def _forward(model, contract, case, pieces, cache, sampling_seeds, rows_seen):
    """(batch, region calls) of one forward over `pieces`, logits, logprob and sampler too;
    `rows_seen` (a RowCapture) keeps the row-wise calls' arguments for the replay."""
    capture = Capture()
    rows_seen.start()
    dispatch = RegionDispatch(contract, [capture, rows_seen])
    batch = TokenBatch.from_sequences(pieces, case, device=device.target())
    with torch.no_grad():
        logits = model.logits(model(batch, dispatch, cache), dispatch, case)
        dispatch("logprob", case, None, logits, batch.tokens, torch.ones(batch.tokens.shape[0], device=device.target()))
        params = [SamplingParams(1.0, top_k=50, seed=sampling_seeds[s.seq_id])
                  for s in batch.segments for _ in range(s.length)]
        dispatch("sampler", case, None, logits, params, batch.positions.tolist())
    return batch, capture.calls


def _rows_of(batch, calls, index: int) -> dict:
    """{"region|layer|n": [summaries]}: segment `index`'s rows of every region output, and the
    whole outputs of the calls on its sequence alone ("region|layer|seq n")."""
    segment = batch.segments[index]
    counts, rows = {}, {}
    for region, layer, outputs, alone in calls:
        if alone is not None and alone.seq_id != segment.seq_id:
            continue  # another sequence's own call
        key = (region, layer, alone is not None)
        n = counts[key] = counts.get(key, -1) + 1
        tensors = [t for t in outputs if isinstance(t, torch.Tensor)]
        whole = region in WHOLE_REGIONS or alone is not None
        rows[f"{region}|{layer}|{'seq ' if alone is not None else ''}{n}"] = [
            summary(t if whole else t[segment.rows]) for t in tensors]
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
        self.rows_seen = RowCapture()
        self.cache = TransientCache.for_case(model.config, case)
        history = [(seq, 0, ids[:h]) for seq, h, ids in self.probes if h] + [
            (seq, 0, self.tokens(h)) for seq, h in self.pool if h]
        if history:  # prefilled once; every batch runs on a copy
            _forward(model, contract, "engine_prefill", history, self.cache, self.seeds, RowCapture())

    def run(self, pieces):
        return _forward(self.model, self.contract, self.case, pieces, copy.deepcopy(self.cache), self.seeds,
                        self.rows_seen)

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


def case_runs(model, contract, case: str, seed: int, probes: dict) -> dict:
    """{alone: [rows of each probe alone], batches: [{num_rows, num_segments, probes: [{index,
    first_row, rows}]}], threads: {alone, batches}, row_replay (gates/row_replay.py)} of one
    case under `seed`."""
    rng = random.Random(seed)
    world = World(model, contract, case, rng, probes)
    alone_threads, batch_threads = thread_counts()
    alone = []
    for index in range(len(world.probes)):
        with intra_op_threads(alone_threads):
            batch, calls = world.run([world.probe_piece(index)])
        alone.append(_rows_of(batch, calls, 0))
    batches = []
    for num_rows in [n for n in BATCH_SIZES if 1 < n <= MAX_ROWS[world.kind]]:
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
        placed = []
        for index in chosen:
            position = next(k for k, s in enumerate(batch.segments) if s.seq_id == world.probes[index][0])
            placed.append({"index": index, "first_row": batch.segments[position].row,
                           "rows": _rows_of(batch, calls, position)})
        batches.append({"num_rows": num_rows, "num_segments": len(pieces), "probes": placed})
    return {"alone": alone, "batches": batches, "threads": {"alone": alone_threads, "batches": batch_threads},
            "row_replay": replay(RegionDispatch(contract), world.rows_seen)}
