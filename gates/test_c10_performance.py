"""Gate C10: performance.

Passes when the contract under test's rollout throughput (generated tokens per second of the
engine, continuous batching) is at least FLOOR (0.70) times the frozen baseline's beyond the
noise: the median of the interleaved pairs' ratios has an order-statistic interval
(gates/ratio_verdict.py) that clears the floor (below it: fail; straddling it after
BITWISE_C10_MAX_PAIRS pairs, 7: inconclusive, never a pass); the baseline is the fast
contract of the commit the device target's record names (baseline/frozen.json on the CPU,
baseline/frozen-cuda.json on CUDA), exported from git (`git archive`: that commit's kernels/
and gates/, nothing of the working tree) and run in its own process, while the candidate runs
the current tree in its own process; both time the generation of the same freshly seeded
workload on the same seeded weights (saved once, mapped by every process) by an engine warmed
by one run of it (building the engine, copying weights and capturing graphs untimed; then
gc.freeze, so collections in the timed runs walk only new objects, each run's counted), a
sample timing the plan's `repeats` runs back to back (5 on CUDA, where one run is ~0.5 s),
interleaved (baseline, candidate, ...; 3 pairs first, BITWISE_C10_PAIRS changes the count and
the inputs record it), every raw sample in the result; and every timed candidate sample's
outputs (tokens and log-prob bits) equal an untimed run of the same workload on a fresh
engine here (so a patched timer, cached outputs or a reused engine's state cannot pass), the
baseline's samples equal each other. On the CPU a sample's throughput is over the timed
process's CPU time, with one intra-op thread (gates/cpu_timing.py: no barrier to spin at),
so a neighbour that deschedules it stretches wall time only (wall time is recorded beside
it; a busy sibling hyperthread still widens the noise); on CUDA over CUDA-synced wall time.
What is timed follows the target (`plan`): on the CPU the model's cut with the gates' small
engine, a smoke figure; on CUDA the model at full width (qwen3-1.7b, nemotron-wide-cut), 64
sequences with room to batch them all, CUDA graphs for decode where both trees' engines
replay them for the model (else both run decode eagerly, and the inputs say why), as
gpu_rollout.py runs it; both sides held to the same host cores, each run recording the core
it ran on and the GPU's clocks (gates/timing_state.py).
Negative controls: a planted slow path (every linear computed four times, the same bits)
fails it with two busy processes beside it (tests/test_c10_under_load.py, where the
consistent path must not fail under the same load); so do a floor out of reach
(tests/test_gate_c00_c10.py) and a missing frozen baseline.
"""
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hashlib import sha256

import torch

from gates import device
from gates.baseline import ROOT, RUN_PATHS, export_commit, no_baseline, read_frozen
from gates.cpu_timing import timed_environment
from gates.faults import register_all
from gates.inputs import fresh_seed
from gates.ratio_verdict import decide
from gates.subject import subject_config_path
from gates.timing_state import hold_to_cores, machine_state, timing_cores
from gates.workload import Workload, rollout, seeded_weights
from kernels.contract import load_contract
from kernels.engine.graphs import graphs_unsupported
from kernels.models.config import load_model_config
from kernels.models.registry import config_name

FLOOR = float(os.environ.get("BITWISE_C10_FLOOR", "0.70"))
PAIRS = int(os.environ.get("BITWISE_C10_PAIRS", "3"))  # the tests' negative control times one pair
MAX_PAIRS = int(os.environ.get("BITWISE_C10_MAX_PAIRS", str(max(PAIRS, 7))))
if PAIRS < 1 or MAX_PAIRS < PAIRS:
    raise ValueError(f"BITWISE_C10_PAIRS / BITWISE_C10_MAX_PAIRS: at least one timed pair and no fewer "
                     f"at most than at first, got {PAIRS} / {MAX_PAIRS}")


def rollout_options(asked: dict) -> dict:
    """The rollout options a plan asks for: its engine settings and, off the CPU, its shape.
    The CPU plan asks for none, so the CPU baseline's older make_engine is called as it was."""
    options = dict(asked.get("engine", {}))
    if "shape" in asked:
        from gates.workload import EngineShape
        options["shape"] = EngineShape(**asked["shape"])
    return options


def mapped_weights(asked: dict) -> dict:
    """The plan's seeded weights, mapped from the file the gate wrote once (write_weights)."""
    return torch.load(asked["weights_file"], mmap=True, weights_only=True)


def completions_digest(completions) -> str:
    """Tokens and log-prob bits of every completion, in order (sha256)."""
    digest = sha256()
    for c in completions:
        digest.update(repr(c.tokens).encode())
        digest.update(c.logprob_tensor.float().cpu().numpy().tobytes())
    return digest.hexdigest()


# Run with cwd = a source tree: it imports that tree's kernels and gates.workload, builds one
# engine, runs the workload on it once to warm it (Triton compiles, decode graphs captured,
# weights copied), then times the workload's generation `repeats` times on the same engine
# (arrivals counted from each run's first step again, as on a fresh engine) and prints the
# totals, each run's tokens/s and output digest, and where kernels came from. Building the
# engine and capturing graphs are not generation, so they stay untimed; several runs per
# process make one sample span seconds, not the half second one GPU run of the workload takes.
_TIMING_PROGRAM = """
import gc, json, os, subprocess, sys, time, kernels, torch
from gates.faults import register_all
from gates.workload import Workload, make_engine, make_requests
from kernels.contract import load_contract
from kernels.models.config import load_model_config
from hashlib import sha256
{shared_source}
asked = json.loads(sys.argv[1])
register_all()  # the contract under test may name a planted fault
hold_to_cores(asked.get("cores"))
options, sync = rollout_options(asked), (lambda: None)
if asked.get("device", "cpu") != "cpu":  # the CPU baseline's tree predates gates.device.select
    from gates import device
    device.select(asked["device"])
    sync = torch.cuda.synchronize
config, contract = load_model_config(asked["config"]), load_contract(asked["contract"])
weights, workload = mapped_weights(asked), Workload(**asked["workload"])
engine = make_engine(config, contract, weights, workload, **options)
engine.generate(make_requests(workload, config.vocab_size))
sync()
gc.collect()
gc.freeze()  # the warm engine's objects leave the collector's generations, as serving engines do
runs, recorded = [], asked.get("device", "cpu") != "cpu"
before = machine_state() if recorded else None
for _ in range(asked.get("repeats", 1)):
    engine.step_count = 0  # both trees' engines count arrival steps from here
    collections = [g["collections"] for g in gc.get_stats()]
    started, cpu_started = time.perf_counter(), time.process_time()
    completions = engine.generate(make_requests(workload, config.vocab_size))
    sync()
    runs.append({"wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu_started,
                 "gc_collections": [g["collections"] - c for g, c in zip(gc.get_stats(), collections)],
                 "tokens": sum(len(c.tokens) for c in completions), "digest": completions_digest(completions),
                 "after": machine_state() if recorded else None})
print(json.dumps({"tokens": sum(r["tokens"] for r in runs), "wall_s": sum(r["wall_s"] for r in runs),
                  "cpu_s": sum(r["cpu_s"] for r in runs), "kernels": kernels.__file__,
                  "digests": [r["digest"] for r in runs],
                  "runs_tokens_per_s": [r["tokens"] / r["wall_s"] for r in runs],
                  "machine": {"cores": sorted(os.sched_getaffinity(0)), "before": before,
                              "gc_collections_each_run": [r["gc_collections"] for r in runs],
                              "after_each_run": [r["after"] for r in runs]}}))
""".replace("{shared_source}", "".join(inspect.getsource(f) for f in (rollout_options, mapped_weights,
                                                                        completions_digest, hold_to_cores,
                                                                        machine_state)))


def _run_in_tree(tree, program: str, argument: str, *, what: str, cwd=None) -> str:
    """The stripped stdout of `program` run in a fresh process on `tree`'s kernels
    (PYTHONPATH=tree, cwd `cwd` or the tree, one intra-op thread: gates/cpu_timing.py);
    RuntimeError with its stderr if it fails."""
    result = subprocess.run([sys.executable, "-c", program, argument], cwd=cwd or tree, capture_output=True,
                            text=True, env=timed_environment(PYTHONPATH=str(tree)))
    if result.returncode != 0:
        raise RuntimeError(f"{what} in {tree} failed: {result.stderr[-2000:]}")
    return result.stdout.strip()


def timed_rollout(tree, asked: dict) -> dict:
    """One sample: a fresh process on `tree`'s kernels times the workload on a warmed engine; {tokens_per_s,
    digest of its outputs}. The tree under judgement runs with the harness's pristine gates
    (BITWISE_APPARATUS) as its working directory when there is one."""
    apparatus = os.environ.get("BITWISE_APPARATUS") if Path(tree) == ROOT else None
    started = time.perf_counter()
    answer = json.loads(_run_in_tree(tree, _TIMING_PROGRAM, json.dumps(asked), what="timing",
                                     cwd=apparatus).splitlines()[-1])
    if not os.path.realpath(answer["kernels"] or "/").startswith(os.path.realpath(tree)):
        raise RuntimeError(f"timing in {tree} imported kernels from {answer['kernels']}")
    # on the CPU the work is the process's CPU time (one intra-op thread): descheduling stretches wall time only
    seconds = answer["cpu_s"] if asked.get("device", "cpu") == "cpu" else answer["wall_s"]
    return {**answer, "tokens_per_s": answer["tokens"] / seconds,
            "wall_tokens_per_s": answer["tokens"] / answer["wall_s"],
            "process_s": time.perf_counter() - started}  # set-up included: the gate's cost


GPU_SIZES = {"qwen3": "full", "nemotron": "wide-cut"}  # full width: a cut only measures launch overhead there


def plan(model: str, target: str, seed: int) -> dict:
    """What both sides time on this target: the config and workload, and off the CPU the
    device, the engine's shape (room for every sequence at once) and its options."""
    if target == "cpu":
        return {"config": config_name(model, "cut"),
                "workload": {"num_sequences": 16, "new_tokens": 24, "arrival_spread": 4, "seed": seed}}
    config = config_name(model, GPU_SIZES.get(model, "full"))
    return {"config": config, "device": target,
            "workload": {"num_sequences": 64, "new_tokens": 64, "arrival_spread": 8, "seed": seed}, "repeats": 5,
            "cores": timing_cores(),  # both sides on the same host cores
            "shape": {"tokens_per_step": 4096, "max_running": 64, "block_size": 16},
            "engine": {"cuda_graphs": graphs_unsupported(load_model_config(config), None) is None}}


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


def write_weights(config: str, folder: str) -> str:
    """The model's seeded weights saved once for every process to map: seeding a full-width
    model on the host takes tens of seconds, which each of the 2 x PAIRS processes would
    otherwise spend (the gate's time, never the timed one's)."""
    path = os.path.join(folder, "weights.pt")
    torch.save(seeded_weights(load_model_config(config)), path)
    return path


def untimed_digest(asked: dict) -> str:
    """The candidate's outputs computed here, untimed: what every timed sample must match."""
    register_all()  # the contract under test may name a planted fault
    completions, _ = rollout(load_model_config(asked["config"]), load_contract(asked["contract"]),
                             mapped_weights(asked),
                             Workload(**asked["workload"]), **rollout_options(asked))
    return completions_digest(completions)


def test_throughput_against_the_frozen_baseline(gate):
    target, seed = device.target(), fresh_seed()
    frozen, asked = read_frozen(target=target), plan(gate.model, target, seed)
    gate.inputs = {"seed": seed, "pairs": PAIRS, "plan": asked, "frozen": frozen}
    if frozen is None:
        gate.check("the frozen baseline exists", False, problem=no_baseline(target))
        gate.verdict()
    samples, wall, runs, digests, process_s, machine = ({"baseline": [], "candidate": []} for _ in range(6))
    with tempfile.TemporaryDirectory(prefix="c10-frozen-") as folder:
        baseline_tree = export_commit(frozen["commit"], folder, ROOT, paths=RUN_PATHS)
        if gate.checkpoint:  # its architecture, seeded weights: speed does not follow the values
            asked = dict(asked, config=subject_config_path(gate, "cut", folder))
            if "engine" in asked:
                graphs = graphs_unsupported(load_model_config(asked["config"]), None) is None
                asked = dict(asked, engine=dict(asked["engine"], cuda_graphs=graphs))
            gate.inputs.update(plan=asked, checkpoint="its config, seeded weights")
        refused = asked.get("engine", {}).get("cuda_graphs") and graphs_refused(baseline_tree, asked["config"])
        if refused:  # a fair comparison runs one engine mode on both sides
            asked = dict(asked, engine=dict(asked["engine"], cuda_graphs=False))
            gate.inputs.update(plan=asked, graphs_off=f"the frozen baseline {frozen['tag']}: {refused}")
        shared = dict(asked, weights_file=write_weights(asked["config"], folder))
        baseline_asked = dict(shared, contract="fast")
        candidate_asked = dict(shared, contract=os.path.abspath(gate.contract)
                               if os.path.exists(gate.contract) else gate.contract)
        verdict = None
        while verdict is None or (verdict.status == "inconclusive" and len(samples["baseline"]) < MAX_PAIRS):
            for side, tree, side_asked in (("baseline", baseline_tree, baseline_asked),
                                           ("candidate", ROOT, candidate_asked)):
                answer = timed_rollout(tree, side_asked)
                samples[side].append(answer["tokens_per_s"])
                wall[side].append(answer["wall_tokens_per_s"])
                runs[side].append(answer["runs_tokens_per_s"])
                digests[side].extend(answer["digests"])
                process_s[side].append(round(answer["process_s"], 1))
                machine[side].append(answer.get("machine"))
            pair_ratios = [c / b for b, c in zip(samples["baseline"], samples["candidate"])]
            if len(pair_ratios) >= PAIRS:
                verdict = decide(pair_ratios, FLOOR)
        expected = untimed_digest(candidate_asked)
    gate.inputs["pairs_timed"] = len(samples["baseline"])
    gate.check("every timed candidate sample computed the untimed run's outputs, bit for bit",
               set(digests["candidate"]) == {expected}, expected=expected, timed=digests["candidate"])
    gate.check("the baseline's timed samples agree with each other, bit for bit",
               len(set(digests["baseline"])) == 1, timed=digests["baseline"])
    figures = dict(ratio=verdict.ratio, noise=[verdict.low, verdict.high], noise_coverage=verdict.coverage,
                   pair_ratios=pair_ratios,
                   floor=FLOOR, goal=0.95, samples_tokens_per_s=samples, wall_tokens_per_s=wall,
                   runs_tokens_per_s=runs,
                   timed_by="process CPU time, one intra-op thread" if target == "cpu" else "CUDA-synced wall time",
                   process_seconds=process_s, machine=machine, device=target, config=asked["config"],
                   baseline={"tag": frozen["tag"], "commit": frozen["commit"], "contract": "fast"},
                   note=("CPU smoke figure; the GPU figure against the frozen baseline is the one that counts"
                         if target == "cpu" else "the frozen fast baseline at full width on this device"))
    name = f"rollout throughput ratio >= {FLOOR} x the frozen baseline, beyond the noise"
    if verdict.status == "inconclusive":
        gate.check_inconclusive(name, **figures)
    else:
        gate.check(name, verdict.status == "pass", **figures)
    gate.verdict()
