"""Gate C02: batch invariance.

Passes when, in every case of the model's cut (and of its quantized cut where one ships),
each probe sequence's rows of every region
output (all region calls, lm_head, logprob and sampler included, captured through a
RegionDispatch observer) computed in batches of other random sequences, at a random place,
with 2 to 128 rows in all (64 one-token decodes at most; primes, powers of two and the
largest affordable; the probe alone is the 1-row end), equal bit for bit the same rows
computed with the probe alone; on the CPU the probe alone runs on 1 intra-op thread and the
batches on at least 2 (an engine's and a trainer's pools may differ); and the decode probes'
contexts end on either side of the contract's key block and the config's SSM chunk and run
past two key blocks (gates/boundaries.py; else vacuous, recorded as `coverage`); and every
call site of a row-wise region in a case, replayed on all the rows it saw there (hundreds),
gives each row the same bits in one call of all of them as in calls of 1-64 rows, the
norms' rows also widened to fp32, where a change of the sum's order is not rounded away
(gates/row_replay.py; vacuous without a site, or without one past 64 rows); rows are
compared by the sha256 of their bytes, computed in a worker process (gates/candidate.py,
gates/batch_runs.py), and this process, which writes the verdict, loads no module of the code
under test (a condition; `harness locate` gives the elements of a difference).
Negative control: the fast contract fails it, and so does the consistent contract with every
linear region mapped to linear.fast_split_k (split-K below 64 rows only) or to
linear.planted_thread_split_k (a reduction split per intra-op thread), or the norms to
norm.planted_sum_in_halves_below_16_rows (a bf16 output that hides the order: the replay's
fp32 rows catch it); decode probes that cross no boundary (BITWISE_C02_DECODE_HISTORIES)
fail it as vacuous.

What a batch is, per case: gates/batch_runs.py. An outside target (gates/target.py), which
has no region doors, is judged on its two sides: 16 random prompts, each a probe, completed
greedily and scored one per call and in shuffled batches of 2, 8 and 16 (gates/target_runs.py).
"""

from gates import device
from gates.boundaries import coverage
from gates.candidate import ask, ask_once, check_judge_clean, confinement
from gates.inputs import fresh_seed
from gates.target_runs import batch_runs, check_batches, judge_outside

CANDIDATE_IN_WORKERS = True  # gates/conftest.py: this module never imports the code under test
TARGET_NEEDS = ()  # an outside target is judged on its generate and score (below)
KIND = {"engine_prefill": "prefill", "engine_decode": "decode", "engine_graph": "decode",
        "trainer_fwd": "trainer", "trainer_bwd": "trainer"}


def compare_case(runs: dict, where: dict, probes: list) -> dict:
    """What comparing each probe's rows in every batch with its rows alone found: counts, the
    regions compared and differing, the first difference (region call, probe [history, rows],
    digests)."""
    figures = {"num_comparisons": 0, "num_differing": 0, "differing_regions": {}, "first_difference": None}
    regions = set()
    for batch in runs["batches"]:
        for placed in batch["probes"]:
            alone = runs["alone"][placed["index"]]
            for key, expected in alone.items():
                region, layer, call = key.split("|")
                figures["num_comparisons"] += 1
                regions.add(region)
                got = placed["rows"].get(key)
                if got == expected:
                    continue
                figures["num_differing"] += 1
                figures["differing_regions"][region] = figures["differing_regions"].get(region, 0) + 1
                if figures["first_difference"] is None:
                    figures["first_difference"] = {
                        **where, "batch_rows": batch["num_rows"], "num_segments": batch["num_segments"],
                        "probe": probes[placed["index"]], "probe_first_row": placed["first_row"], "region": region,
                        "layer": None if layer == "None" else int(layer), "call": int(call),
                        "detail": "missing in the batch" if got is None else "bits differ", "alone": expected,
                        "batch": got}
    return {**figures, "regions_compared": sorted(regions)}


def test_rows_do_not_depend_on_the_batch(gate):
    model_seed = fresh_seed() % 1000
    if gate.target != "ours":
        return judge_outside(gate, batch_runs, check_batches, "every region's rows equal alone and in batches")
    sizes = ask_once("sizes", {"model": gate.model, "checkpoint": gate.checkpoint})["sizes"]
    asked = {size: {"subject": gate.subject(size), "model_seed": model_seed, "device": device.target(),
                    "seeds": {case: fresh_seed() for case in KIND}} for size in sizes}
    # one size after the other: each worker's batches take every core (two at once oversubscribe them)
    answers = {size: ask("c02_runs", asked[size]) for size in sizes}
    gate.inputs = {"model_seed": model_seed, "workers": confinement(), "sizes": {}}
    for size, answer in answers.items():
        probes, crossing = answer["probes"], answer["boundaries"]
        block, chunk = crossing["key_block"], crossing["ssm_chunk"]
        crossed = coverage([history + 1 for history, _ in probes["decode"]], block, chunk or block)
        gate.inputs["sizes"][size] = {"config": answer["config"], "probes": probes, "coverage": crossed,
                                      "seeds": asked[size]["seeds"]}
        gate.check(f"[{size}] decode probes end either side of a key block{' and an SSM chunk' if chunk else ''} "
                   f"and past two key blocks (else vacuous)",
                   crossed["either_side_of_a_key_block"] and crossed["key_blocks_crossed"] >= 2
                   and (crossed["either_side_of_an_ssm_chunk"] or not chunk), **crossed)
        for case, runs in answer["cases"].items():
            rows = [batch["num_rows"] for batch in runs["batches"]]
            per_probe = [sum(placed["index"] == index for batch in runs["batches"] for placed in batch["probes"])
                         for index in range(len(runs["alone"]))]
            figures = compare_case(runs, {"case": case}, probes[KIND[case]])
            gate.check(f"[{size}] {case}: probe rows equal alone and in batches of {rows[0]}..{rows[-1]} rows",
                       figures["num_differing"] == 0 and min(per_probe) > 0, batch_rows=rows,
                       batches_per_probe=per_probe, intra_op_threads=runs["threads"], **figures)
            replayed = runs["row_replay"]
            gate.check(f"[{size}] {case}: replayed row-wise regions equal in one call and in calls of "
                       f"{replayed['call_sizes'][0]}-{replayed['call_sizes'][-1]} rows (else vacuous)",
                       replayed["differing_rows"] == 0 and replayed["sites"] > 0
                       and (replayed["rows"][1] or 0) > replayed["call_sizes"][-1], **replayed)
    check_judge_clean(gate)
    gate.verdict()
