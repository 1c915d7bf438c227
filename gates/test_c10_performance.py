"""Gate C10: performance.

Passes when the contract under test's rollout throughput (generated tokens per second of the
engine, continuous batching) is at least FLOOR (0.70) times the frozen baseline's beyond the
noise: the median of the interleaved pairs' ratios has an order-statistic interval
(gates/ratio_verdict.py) that clears the floor (below it: fail; straddling it after
BITWISE_C10_MAX_PAIRS pairs, 7: inconclusive, never a pass); the baseline is the fast
contract of the commit the device target's record names (baseline/frozen.json on the CPU,
baseline/frozen-cuda.json on CUDA), exported from git (`git archive`: that commit's kernels/
and gates/, nothing of the working tree) and run in its own process, while the candidate runs
the current tree in its own process (gates/timed_worker.py); both generate the plan's workload
on the same seeded weights (saved once, mapped by every process) on an engine warmed by one
run of it, and on CUDA two more seeds' (engine built, weights copied, graphs captured and
kernels compiled for the shapes those arrivals give: untimed; then gc.freeze), and then, a
sample, the plan's `repeats` runs (5 on CUDA, where one run is ~0.5 s; first one untimed
process per side of WARM_UP_SEEDS seeds, so that what it compiled is in the on-disk caches)
under seeds drawn only when the judge says go, the same for both sides of a pair;
interleaved (baseline, candidate, ...; 3 pairs first, BITWISE_C10_PAIRS changes the count
and the inputs record it), every raw sample and each run's seed in the result; and every timed candidate run's
outputs (tokens and log-prob bits) equal an untimed reference worker's for its seed, the
candidate's trainer scores the reference's first completions to the engine's log-prob bits
(so a path switched while timed, a patched clock, cached or early answers cannot pass), and
the baseline's first sample computes the same outputs in a second process. Every run is
timed by the judge, from its GO to the worker's DONE: on the CPU over the worker's CPU time
read from /proc (schedstat, every thread; one intra-op thread, gates/cpu_timing.py: no barrier
to spin at), so a neighbour that deschedules it stretches wall time only (wall time is
recorded beside it; a busy sibling hyperthread still widens the noise); on CUDA over wall
time, the worker syncing the device before DONE. What the worker measures of itself is
recorded, never used. This process never loads the code under test (a condition): the
subject's config and seeded weights, the timed runs and the trainer's scores all come from
workers (gates/candidate.py, gates/timed_worker.py), every one confined where the machine
allows: a timed candidate worker writes only its scratch folder and its side's Triton cache
(the baseline compiles into its own), and its CPU time counts every process under it.
What is timed follows the target (`plan`): on the CPU the model's cut with the gates' small
engine, a smoke figure; on CUDA the model at full width (qwen3-1.7b, nemotron-wide-cut), 64
sequences with room to batch them all, CUDA graphs for decode where both trees' engines
replay them for the model (else both run decode eagerly, and the inputs say why), as
gpu_rollout.py runs it; both sides held to the same host cores, each run recording the core
it ran on and the GPU's clocks (gates/timing_state.py). A model the frozen commit does not ship
(a family added since) is n/a with the reason, never a pass: the model is the harness's to name
and the frozen tree cannot change, so a candidate cannot make its own model vanish there.
Negative controls: a planted slow path (every linear computed four times, the same bits)
fails it with two busy processes beside it (tests/gates/test_c10_under_load.py, where the
consistent path must not fail under the same load); so do a floor out of reach
(tests/gates/test_gate_c00_c10.py), a missing frozen baseline, and cheats in the candidate's
kernels (tests/gates/test_c10_cheats.py): a patched clock with a slow path, outputs replayed
from the warm run, the fast path taken when timed.
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from gates import device
from gates.baseline import ROOT, RUN_PATHS, no_baseline, read_frozen, tree_models
from gates.candidate import ask, check_judge_clean, confinement
from gates.compare import differing_values
from gates.cpu_timing import timed_environment
from gates.git_objects import export_commit
from gates.inputs import fresh_seed
from gates.ratio_verdict import decide
from gates.switches import switch
from gates.timed_worker import default_triton_cache, drive
from gates.timing_state import timing_cores

CANDIDATE_IN_WORKERS = True  # gates/conftest.py: this module never imports the code under test

FLOOR = switch("BITWISE_C10_FLOOR")
PAIRS = switch("BITWISE_C10_PAIRS")  # the tests' negative control times one pair
MAX_PAIRS = switch("BITWISE_C10_MAX_PAIRS") or max(PAIRS, 7)
if PAIRS < 1 or MAX_PAIRS < PAIRS:
    raise ValueError(f"BITWISE_C10_PAIRS / BITWISE_C10_MAX_PAIRS: at least one timed pair and no fewer "
                     f"at most than at first, got {PAIRS} / {MAX_PAIRS}")


def _run_in_tree(tree, program: str, argument: str, *, what: str) -> str:
    """The stripped stdout of `program` run in a fresh process on `tree`'s kernels; RuntimeError
    with its stderr if it fails."""
    result = subprocess.run([sys.executable, "-c", program, argument], cwd=tree, capture_output=True,
                            text=True, env=timed_environment(PYTHONPATH=str(tree)))
    if result.returncode != 0:
        raise RuntimeError(f"{what} in {tree} failed: {result.stderr[-2000:]}")
    return result.stdout.strip()


WARM_UP_SEEDS = 4  # runs of the untimed warm-up process each side starts with on a GPU
# each side's Triton cache: the candidate's workers, confined, can write only theirs
CACHES = {"candidate": default_triton_cache,
          "baseline": lambda: default_triton_cache().with_name(default_triton_cache().name + "-c10-baseline")}
GPU_SIZES = {"qwen3": "full", "nemotron": "wide-cut", "deepseek": "wide-cut", "qwen3_5": "wide-cut"}  # full width


def subject_size(model: str, target: str) -> str:
    """The size C10 times: the cut on the CPU, full width on a GPU."""
    return "cut" if target == "cpu" else GPU_SIZES.get(model, "full")


def plan(target: str, seed: int, subject: dict) -> dict:
    """What both sides time on this target, for `subject` (gates/procedures.py c10_subject: its
    config, and why the candidate's engine replays no decode graphs for it): the config and
    workload, and off the CPU the device, the engine's shape (room for every sequence at once)
    and its options."""
    if target == "cpu":
        return {"config": subject["config"],
                "workload": {"num_sequences": 16, "new_tokens": 24, "arrival_spread": 4, "seed": seed}}
    return {"config": subject["config"], "device": target,
            "workload": {"num_sequences": 64, "new_tokens": 64, "arrival_spread": 8, "seed": seed}, "repeats": 5,
            "warm_seeds": [fresh_seed(), fresh_seed()],  # arrival patterns beyond the first: shapes compiled untimed
            "cores": timing_cores(),  # both sides on the same host cores
            "shape": {"tokens_per_step": 4096, "max_running": 64, "block_size": 16},
            "engine": {"cuda_graphs": not subject["graphs_refused"]}}


# Run in a source tree (_run_in_tree): whether its engine replays decode graphs for a config (a tree
# from before kernels/engine/graphs.py has none).
GRAPHS_PROBE = """
import sys
try:
    from kernels.engine.graphs import graphs_unsupported
except ModuleNotFoundError:
    print("no kernels/engine/graphs.py")
else:
    from kernels.models.config import load_model_config
    print(graphs_unsupported(load_model_config(sys.argv[1]), None) or "")
"""


def graphs_refused(tree, config: str) -> str:
    """Why `tree`'s engine replays no decode graphs for `config` ('' when it does), asked in a
    process of its own: that tree's kernels, not this one's."""
    return _run_in_tree(tree, GRAPHS_PROBE, config, what="asking about decode graphs")


def trainer_mismatches(asked: dict, seed: int, bits: list) -> int:
    """Log-probs of the completions (tokens, int32 bits) of `seed`'s workload that the
    candidate's trainer scores to other bits (trainer_fwd, the gates' micro-batches), asked in
    a worker of its own."""
    scored = ask("trainer_bits", dict(asked, workload=dict(asked["workload"], seed=seed),
                                      completion_tokens=[tokens for tokens, _ in bits]), side="trainer")["bits"]
    return differing_values(scored, [theirs for _, theirs in bits])


def sample(answer: dict, tokens_per_run: int, target: str) -> dict:
    """One side's sample from its worker's runs, timed from outside: tokens/s over the
    worker's CPU time on the CPU, over wall time on CUDA; each run's rate too."""
    key = "cpu_s" if target == "cpu" else "wall_s"
    runs = answer["runs"]
    return {"tokens_per_s": tokens_per_run * len(runs) / sum(r[key] for r in runs),
            "wall_tokens_per_s": tokens_per_run * len(runs) / sum(r["wall_s"] for r in runs),
            "runs_tokens_per_s": [tokens_per_run / r[key] for r in runs]}


def test_throughput_against_the_frozen_baseline(gate):
    target, seed = device.target(), fresh_seed()
    frozen = read_frozen(target=target)
    gate.inputs = {"seed": seed, "pairs": PAIRS, "frozen": frozen, "workers": confinement()}
    if frozen is None:
        gate.check("the frozen baseline exists", False, problem=no_baseline(target))
        gate.verdict()
    apparatus = switch("BITWISE_APPARATUS")  # the judged tree's workers run from the pristine gates
    keys = ("tokens_per_s", "wall_tokens_per_s", "runs_tokens_per_s", "digests", "process_s", "machine")
    figures, seeds = {key: {"baseline": [], "candidate": []} for key in keys}, []
    with tempfile.TemporaryDirectory(prefix="c10-frozen-") as folder:
        baseline_tree = export_commit(frozen["commit"], Path(folder) / "baseline", ROOT, paths=RUN_PATHS)
        if gate.model not in tree_models(baseline_tree):  # the harness names the model; the frozen tree is fixed
            gate.n_a(f"the frozen baseline {frozen['tag']} ({frozen['commit'][:12]}) predates model "
                     f"{gate.model!r}: freeze a baseline that ships it (harness freeze-baseline)")
        made = Path(folder) / "subject"  # the only folder the candidate's setup worker may write
        made.mkdir()
        subject = ask("c10_subject", {"model": gate.model, "size": subject_size(gate.model, target),
                                      "checkpoint": gate.checkpoint, "folder": str(made)}, writable=[made])
        asked = plan(target, seed, subject)
        gate.inputs["plan"] = asked
        if gate.checkpoint:  # its architecture, seeded weights: speed does not follow the values
            gate.inputs["checkpoint"] = "its config, seeded weights"
        refused = asked.get("engine", {}).get("cuda_graphs") and graphs_refused(baseline_tree, asked["config"])
        if refused:  # a fair comparison runs one engine mode on both sides
            asked = dict(asked, engine=dict(asked["engine"], cuda_graphs=False))
            gate.inputs.update(plan=asked, graphs_off=f"the frozen baseline {frozen['tag']}: {refused}")
        repeats = asked.get("repeats", 1)
        tokens_per_run = asked["workload"]["num_sequences"] * asked["workload"]["new_tokens"]  # no stop token
        shared = dict(asked, weights_file=subject["weights_file"])
        sides = {"baseline": (baseline_tree, dict(shared, contract="fast"), None),
                 "candidate": (ROOT, dict(shared, contract=os.path.abspath(gate.contract)
                                          if os.path.exists(gate.contract) else gate.contract), apparatus)}
        if target != "cpu":  # a process per side first, untimed: compiles land in the on-disk caches
            gate.inputs["warm_up_process_s"] = {
                side: round(drive(tree, side_asked, [fresh_seed() for _ in range(WARM_UP_SEEDS)], cwd=cwd,
                                  triton_cache=CACHES[side]())["process_s"], 1)
                for side, (tree, side_asked, cwd) in sides.items()}
        verdict = None
        while verdict is None or (verdict.status == "inconclusive" and len(seeds) < MAX_PAIRS):
            seeds.append([fresh_seed() for _ in range(repeats)])  # drawn now: nothing prepared
            for side, (tree, side_asked, cwd) in sides.items():
                answer = drive(tree, side_asked, seeds[-1], cwd=cwd, triton_cache=CACHES[side]())
                for key, value in sample(answer, tokens_per_run, target).items():
                    figures[key][side].append(value)
                figures["digests"][side].append([run["digest"] for run in answer["runs"]])
                figures["process_s"][side].append(round(answer["process_s"], 1))
                figures["machine"][side].append({**answer["machine"], "worker_reported": answer["worker_reported"],
                                                 "phases": answer["phases"]})
            pair_ratios = [c / b for b, c in zip(figures["tokens_per_s"]["baseline"],
                                                 figures["tokens_per_s"]["candidate"])]
            if len(pair_ratios) >= PAIRS:
                verdict = decide(pair_ratios, FLOOR)
        tree, candidate_asked, cwd = sides["candidate"]
        every_seed = [s for pair in seeds for s in pair]
        reference = drive(tree, candidate_asked, every_seed, cwd=cwd, bits_of_first=True)
        baseline_again = drive(sides["baseline"][0], sides["baseline"][1], seeds[0],
                               triton_cache=CACHES["baseline"]())
        mismatches = trainer_mismatches(candidate_asked, every_seed[0], reference["bits"])
    gate.inputs.update(pairs_timed=len(seeds), run_seeds=seeds)
    timed = [d for sample_digests in figures["digests"]["candidate"] for d in sample_digests]
    gate.check("every timed candidate run computed the untimed reference's outputs for its seed, bit for bit",
               timed == [run["digest"] for run in reference["runs"]], seeds=seeds, timed=timed,
               reference=[run["digest"] for run in reference["runs"]])
    gate.check("the trainer scores the reference's first completions to the engine's log-prob bits",
               mismatches == 0, differing_logprobs=mismatches, seed=every_seed[0])
    gate.check("the baseline's first sample computes the same outputs in a second process, bit for bit",
               figures["digests"]["baseline"][0] == [run["digest"] for run in baseline_again["runs"]],
               timed=figures["digests"]["baseline"][0], again=[run["digest"] for run in baseline_again["runs"]])
    measured = dict(ratio=verdict.ratio, noise=[verdict.low, verdict.high], noise_coverage=verdict.coverage,
                    pair_ratios=pair_ratios, floor=FLOOR, goal=0.95,
                    samples_tokens_per_s=figures["tokens_per_s"], wall_tokens_per_s=figures["wall_tokens_per_s"],
                    runs_tokens_per_s=figures["runs_tokens_per_s"],
                    timed_by=("the worker's CPU time, read by the judge from /proc, one intra-op thread"
                              if target == "cpu" else "wall time from the judge's GO to the worker's DONE "
                              "(the worker syncs the device first)"),
                    process_seconds=figures["process_s"], machine=figures["machine"], device=target,
                    config=asked["config"],
                    baseline={"tag": frozen["tag"], "commit": frozen["commit"], "contract": "fast"},
                    note=("CPU smoke figure; the GPU figure against the frozen baseline is the one that counts"
                          if target == "cpu" else "the frozen fast baseline at full width on this device"))
    name = f"rollout throughput ratio >= {FLOOR} x the frozen baseline, beyond the noise"
    if verdict.status == "inconclusive":
        gate.check_inconclusive(name, **measured)
    else:
        gate.check(name, verdict.status == "pass", **measured)
    check_judge_clean(gate)
    gate.verdict()
