"""Gate C10: performance.

Passes when the contract under test's rollout throughput (generated tokens per second of the
engine on the model's cut, continuous batching) is at least FLOOR (0.70) times the frozen
baseline's: the fast contract of the commit baseline/frozen.json names, exported from git
(`git archive`: that commit's kernels/ and gates/, nothing of the working tree) and run in
its own process, while the candidate runs the current tree in its own process; both time
the same seeded workload after a warm-up, interleaved (baseline, candidate, baseline, ...),
compared by medians, every raw sample in the result. On CPU this is a smoke figure: the GPU
figure is the one that counts (`harness profile` adds trainer step times and per-region
costs). Negative control: a planted slow path (tests/test_gate_c00_c10.py) fails it, and so
does a missing frozen baseline.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

from gates.baseline import NO_BASELINE, ROOT, export_commit, read_frozen
from gates.inputs import fresh_seed
from kernels.models.registry import config_name

FLOOR = float(os.environ.get("BITWISE_C10_FLOOR", "0.70"))
PAIRS = 3

# Run with cwd = a source tree: it imports that tree's kernels and gates.workload, warms up,
# times one rollout and prints tokens/s and where kernels came from.
_TIMING_PROGRAM = """
import json, sys, time, kernels
from gates.faults import register_all
from gates.workload import Workload, rollout, seeded_weights
from kernels.contract import load_contract
from kernels.models.config import load_model_config
asked = json.loads(sys.argv[1])
register_all()  # the contract under test may name a planted fault
config, contract = load_model_config(asked["config"]), load_contract(asked["contract"])
weights, workload = seeded_weights(config), Workload(**asked["workload"])
rollout(config, contract, weights, workload)
started = time.perf_counter()
completions, _ = rollout(config, contract, weights, workload)
elapsed = time.perf_counter() - started
print(json.dumps({"tokens_per_s": sum(len(c.tokens) for c in completions) / elapsed,
                  "kernels": kernels.__file__}))
"""


def tokens_per_second(tree, asked: dict) -> float:
    """One sample: a fresh process in `tree` times a warmed-up rollout."""
    result = subprocess.run([sys.executable, "-c", _TIMING_PROGRAM, json.dumps(asked)], cwd=tree,
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree)})
    if result.returncode != 0:
        raise RuntimeError(f"timing in {tree} failed: {result.stderr[-2000:]}")
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    if not os.path.realpath(answer["kernels"] or "/").startswith(os.path.realpath(tree)):
        raise RuntimeError(f"timing in {tree} imported kernels from {answer['kernels']}")
    return answer["tokens_per_s"]


def test_throughput_against_the_frozen_baseline(gate):
    frozen, seed = read_frozen(), fresh_seed()
    workload = {"num_sequences": 16, "new_tokens": 24, "arrival_spread": 4, "seed": seed}
    gate.inputs = {"seed": seed, "pairs": PAIRS, "workload": workload, "frozen": frozen}
    if frozen is None:
        gate.check("the frozen baseline exists", False, problem=NO_BASELINE)
        gate.verdict()
    config = config_name(gate.model, "cut")
    baseline_asked = {"config": config, "contract": "fast", "workload": workload}
    candidate_asked = {"config": config, "contract": os.path.abspath(gate.contract)
                       if os.path.exists(gate.contract) else gate.contract, "workload": workload}
    samples = {"baseline": [], "candidate": []}
    with tempfile.TemporaryDirectory(prefix="c10-frozen-") as folder:
        baseline_tree = export_commit(frozen["commit"], folder, ROOT, paths=("kernels", "gates"))
        for _ in range(PAIRS):
            samples["baseline"].append(tokens_per_second(baseline_tree, baseline_asked))
            samples["candidate"].append(tokens_per_second(ROOT, candidate_asked))
    ratio = statistics.median(samples["candidate"]) / statistics.median(samples["baseline"])
    gate.check(f"rollout throughput ratio >= {FLOOR} x the frozen baseline", ratio >= FLOOR, ratio=ratio,
               floor=FLOOR, goal=0.95, samples_tokens_per_s=samples, device="cpu",
               baseline={"tag": frozen["tag"], "commit": frozen["commit"], "contract": "fast"},
               note="CPU smoke figure; the GPU figure against the frozen baseline is the one that counts")
    gate.verdict()
