"""Gate C10: performance.

Passes when the consistent contract's rollout throughput (generated tokens per second of the
engine on the model's cut, continuous batching) is at least FLOOR (0.70) times the fast
contract's on the same workload, measured interleaved (fast, consistent, fast, ...) in one
process and compared by medians, with every raw sample in the result, and the in-tree fast
contract it timed is the frozen baseline (its content hash equals baseline/frozen.json's;
when the fast path has changed since the freeze, `harness profile` measures against the
frozen worktree instead). On CPU this is a smoke figure: the GPU figure is the one that
counts. Negative control: a planted slow path (tests/test_gate_c00_c10.py) fails it, and so
does a fast path edited after the freeze (tests/test_freeze_profile.py).
"""
import os
import statistics
import time

from gates.baseline import NO_BASELINE, fast_content_hash, read_frozen
from gates.inputs import fresh_seed
from gates.workload import Workload, rollout, seeded_weights
from kernels.contract import load_contract
from kernels.models.config import load_model_config
from kernels.models.registry import config_name

FLOOR = float(os.environ.get("BITWISE_C10_FLOOR", "0.70"))
PAIRS = 3


def _tokens_per_second(config, contract, weights, workload) -> float:
    started = time.perf_counter()
    completions, _ = rollout(config, contract, weights, workload)
    return sum(len(c.tokens) for c in completions) / (time.perf_counter() - started)


def test_consistent_throughput_against_baseline(gate):
    config = load_model_config(config_name(gate.model, "cut"))
    baseline, candidate = load_contract("fast"), load_contract(gate.contract)
    seed = fresh_seed()
    workload = Workload(num_sequences=16, new_tokens=24, arrival_spread=4, seed=seed)
    gate.inputs = {"seed": seed, "pairs": PAIRS, "num_sequences": 16, "new_tokens": 24}
    weights = seeded_weights(config)
    _tokens_per_second(config, candidate, weights, workload)  # warm-up, not counted
    samples = {"baseline": [], "candidate": []}
    for _ in range(PAIRS):
        samples["baseline"].append(_tokens_per_second(config, baseline, weights, workload))
        samples["candidate"].append(_tokens_per_second(config, candidate, weights, workload))
    ratio = statistics.median(samples["candidate"]) / statistics.median(samples["baseline"])
    gate.check(f"rollout throughput ratio >= {FLOOR}", ratio >= FLOOR, ratio=ratio, floor=FLOOR,
               goal=0.95, samples_tokens_per_s=samples, device="cpu",
               note="CPU smoke figure; the GPU figure against the frozen baseline is the one that counts")
    _check_baseline_is_frozen(gate)
    gate.verdict()


def _check_baseline_is_frozen(gate):
    frozen, in_tree = read_frozen() or {}, fast_content_hash()
    same = frozen.get("content_hash") == in_tree
    problem = None if same else NO_BASELINE if not frozen else (
        "the in-tree fast path is not the frozen baseline: use harness profile, which measures "
        "the frozen commit in its own worktree")
    gate.check("measured against the frozen baseline", same, problem=problem,
               in_tree_content_hash=in_tree, frozen=frozen or None)
