"""Gate C10: performance.

Passes when the contract under test's rollout throughput (generated tokens per second of the
engine on the model's cut, continuous batching) is at least FLOOR (0.70) times the frozen
baseline's: the fast contract of the commit baseline/frozen.json names, exported from git
(`git archive`: that commit's kernels/ and gates/, nothing of the working tree) and run in
its own process, while the candidate runs the current tree in its own process; both time
the same freshly seeded workload after a warm-up, interleaved (baseline, candidate, ...; 3
pairs, BITWISE_C10_PAIRS changes the count and the inputs record it), compared by medians,
every raw sample in the result; and every timed candidate sample's
outputs (tokens and log-prob bits) equal an untimed run of the same workload here (so a
patched timer or cached outputs cannot pass), the baseline's samples equal each other. On CPU this is a smoke figure: the GPU
figure is the one that counts (`harness profile` adds trainer step times and per-region
costs). Negative control: a planted slow path (tests/test_gate_c00_c10.py) fails it, and so
does a missing frozen baseline.
"""
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from hashlib import sha256

from gates import device
from gates.baseline import NO_BASELINE, ROOT, export_commit, read_frozen
from gates.faults import register_all
from gates.inputs import fresh_seed
from gates.workload import Workload, rollout, seeded_weights
from kernels.contract import load_contract
from kernels.models.config import load_model_config
from kernels.models.registry import config_name

FLOOR = float(os.environ.get("BITWISE_C10_FLOOR", "0.70"))
PAIRS = int(os.environ.get("BITWISE_C10_PAIRS", "3"))  # the tests' negative control times one pair
if PAIRS < 1:
    raise ValueError(f"BITWISE_C10_PAIRS: at least one timed pair, got {PAIRS}")


def completions_digest(completions) -> str:
    """Tokens and log-prob bits of every completion, in order (sha256)."""
    digest = sha256()
    for c in completions:
        digest.update(repr(c.tokens).encode())
        digest.update(b"".join(lp.float().numpy().tobytes() for lp in c.logprobs))
    return digest.hexdigest()


# Run with cwd = a source tree: it imports that tree's kernels and gates.workload, warms up,
# times one rollout and prints tokens/s, the digest of its outputs and where kernels came from.
_TIMING_PROGRAM = """
import json, sys, time, kernels
from gates.faults import register_all
from gates.workload import Workload, rollout, seeded_weights
from kernels.contract import load_contract
from kernels.models.config import load_model_config
from hashlib import sha256
{digest_source}
asked = json.loads(sys.argv[1])
register_all()  # the contract under test may name a planted fault
config, contract = load_model_config(asked["config"]), load_contract(asked["contract"])
weights, workload = seeded_weights(config), Workload(**asked["workload"])
rollout(config, contract, weights, workload)
started = time.perf_counter()
completions, _ = rollout(config, contract, weights, workload)
elapsed = time.perf_counter() - started
print(json.dumps({"tokens_per_s": sum(len(c.tokens) for c in completions) / elapsed,
                  "kernels": kernels.__file__, "digest": completions_digest(completions)}))
""".replace("{digest_source}", inspect.getsource(completions_digest))


def timed_rollout(tree, asked: dict) -> dict:
    """One sample: a fresh process on `tree`'s kernels times a warmed-up rollout; {tokens_per_s,
    digest of its outputs}. The tree under judgement runs with the harness's pristine gates
    (BITWISE_APPARATUS) as its working directory when there is one."""
    apparatus = os.environ.get("BITWISE_APPARATUS") if Path(tree) == ROOT else None
    result = subprocess.run([sys.executable, "-c", _TIMING_PROGRAM, json.dumps(asked)], cwd=apparatus or tree,
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree)})
    if result.returncode != 0:
        raise RuntimeError(f"timing in {tree} failed: {result.stderr[-2000:]}")
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    if not os.path.realpath(answer["kernels"] or "/").startswith(os.path.realpath(tree)):
        raise RuntimeError(f"timing in {tree} imported kernels from {answer['kernels']}")
    return answer


def untimed_digest(asked: dict) -> str:
    """The candidate's outputs computed here, untimed: what every timed sample must match."""
    register_all()  # the contract under test may name a planted fault
    config = load_model_config(asked["config"])
    completions, _ = rollout(config, load_contract(asked["contract"]), seeded_weights(config),
                             Workload(**asked["workload"]))
    return completions_digest(completions)


def test_throughput_against_the_frozen_baseline(gate):
    if device.target() != "cpu":
        gate.n_a(f"the frozen baseline runs on the CPU only; a {device.target()} fast baseline is not frozen "
                 "yet (issue 7), so there is nothing fair to time against on this device")
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
    samples, digests = {"baseline": [], "candidate": []}, {"baseline": [], "candidate": []}
    with tempfile.TemporaryDirectory(prefix="c10-frozen-") as folder:
        baseline_tree = export_commit(frozen["commit"], folder, ROOT, paths=("kernels", "gates"))
        for _ in range(PAIRS):
            for side, tree, asked in (("baseline", baseline_tree, baseline_asked), ("candidate", ROOT, candidate_asked)):
                answer = timed_rollout(tree, asked)
                samples[side].append(answer["tokens_per_s"])
                digests[side].append(answer["digest"])
    expected = untimed_digest(candidate_asked)
    gate.check("every timed candidate sample computed the untimed run's outputs, bit for bit",
               set(digests["candidate"]) == {expected}, expected=expected, timed=digests["candidate"])
    gate.check("the baseline's timed samples agree with each other, bit for bit",
               len(set(digests["baseline"])) == 1, timed=digests["baseline"])
    ratio = statistics.median(samples["candidate"]) / statistics.median(samples["baseline"])
    gate.check(f"rollout throughput ratio >= {FLOOR} x the frozen baseline", ratio >= FLOOR, ratio=ratio,
               floor=FLOOR, goal=0.95, samples_tokens_per_s=samples, device="cpu",
               baseline={"tag": frozen["tag"], "commit": frozen["commit"], "contract": "fast"},
               note="CPU smoke figure; the GPU figure against the frozen baseline is the one that counts")
    gate.verdict()
