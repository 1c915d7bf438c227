"""`harness profile --model nemotron [--pairs N] [--out DIR]`: the consistent path against the
frozen baseline, interleaved, with raw samples and a per-region breakdown.
Two long-lived workers (harness/profile_worker.py): A runs the fast contract in a worktree of the
frozen commit, B the consistent contract in the current tree (uncommitted edits included). They
must agree on weights, workload and environment, and A's fast path must hash to the frozen content
hash; warmed once, they are sampled A B A B ... (DIR/samples.jsonl as taken, DIR/profile.json last:
harness/run_directory.md). A sample's generation is timed in CPU time on one intra-op thread, and
the ratio is C10's: the pairs' median with its order-statistic interval (gates/ratio_verdict.py).
"""
import json
import statistics
import time
from pathlib import Path

from gates.baseline import NO_BASELINE, read_frozen, tree_models
from gates.ratio_verdict import median_interval
from gates.workload import Workload
from harness import workspace
from harness.exit_codes import EXIT_OK
from harness.profile_worker import WorkerProcess
from kernels.models.registry import config_name

DEFAULT_PAIRS = 5
# C10's workload with shorter completions: still mixed prefill/decode steps, and the whole
# profile (warm-up, pairs, one profiled rollout per side) stays near a minute on 2 CPU cores.
DEFAULT_WORKLOAD = {"num_sequences": 16, "new_tokens": 16, "arrival_spread": 4, "seed": 0}
SIDES = ("baseline", "consistent")
MAX_REGIONS_SHOWN = 12
FAIR_ENVIRONMENT = ("torch", "triton", "cuda", "device", "cpu_capability", "num_threads", "python")
"""What both sides must report, and agree on. Fields a later tree added to its fingerprint
(comm_transport, since the layouts) are compared when the frozen commit reports them too."""


class BaselineLacksModel(ValueError):
    """The frozen baseline's tree ships no such model: there is nothing to profile against."""


def profile(model: str, out_dir, pairs: int = DEFAULT_PAIRS, workload: dict | None = None,
            repo_path=".") -> dict:
    """Measure, write samples.jsonl and profile.json under out_dir; the profile.json document."""
    workload = {**DEFAULT_WORKLOAD, **(workload or {})}
    config_name(model, "cut")  # ValueError for a bad model or workload before anything starts
    Workload(**workload)
    if pairs <= 0:
        raise ValueError(f"pairs: must be positive, got {pairs}")
    repo = workspace.open_repo(repo_path)
    root = workspace.repo_root(repo)
    frozen, worktree = frozen_worktree(repo)
    if model not in tree_models(worktree):
        raise BaselineLacksModel(f"the frozen baseline {frozen['tag']} ({frozen['commit'][:12]}) ships no model "
                                 f"{model!r}: nothing to profile against until a baseline that has it is frozen "
                                 "(harness freeze-baseline)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    trees = {"baseline": (worktree, "fast"), "consistent": (root, "consistent")}
    workers = {side: WorkerProcess(side, tree, {"model": model, "contract": contract, "workload": workload})
               for side, (tree, contract) in trees.items()}
    try:
        hellos = {side: worker.ask("hello") for side, worker in workers.items()}
        check_sides(hellos, frozen, trees)
        for worker in workers.values():
            worker.ask("sample")  # warm-up: first-call allocations and caches, not recorded
        samples = interleave(workers, pairs, out / "samples.jsonl")
        regions = {side: worker.ask("regions") for side, worker in workers.items()}
    finally:
        for worker in workers.values():
            worker.close()
    document = summarize(samples, regions, hellos, model=model, workload=workload)
    document.update(commit=workspace.current_commit(repo), tree_dirty=workspace.dirty_paths(repo),
                    baseline={"ref": frozen["tag"], "commit": frozen["commit"],
                              "content_hash": frozen["content_hash"], "worktree": str(worktree)})
    (out / "profile.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return document


def frozen_worktree(repo) -> tuple:
    """(the frozen record, a clean worktree of its commit under .worktrees/)."""
    root = workspace.repo_root(repo)
    frozen = read_frozen(root)
    if frozen is None:
        raise ValueError(NO_BASELINE)
    path = root / workspace.WORKTREES_DIR / f"baseline-{frozen['commit'][:12]}"
    return frozen, workspace.worktree_at(repo, frozen["commit"], path)


def check_sides(hellos: dict, frozen: dict, trees: dict) -> None:
    """ValueError unless each side imported its own tree, both run the same weights, workload
    and environment, and the baseline's fast path is the frozen one."""
    for side, (tree, _) in trees.items():
        if not Path(hellos[side]["kernels"]).resolve().is_relative_to(Path(tree).resolve()):
            raise ValueError(f"{side} worker imported kernels from {hellos[side]['kernels']}, not {tree}")
    for what in ("semantic", "workload"):
        if hellos["baseline"][what] != hellos["consistent"][what]:
            raise ValueError(f"baseline and consistent sides differ in {what}: not a fair comparison")
    differing = environment_differences(hellos["baseline"]["environment"], hellos["consistent"]["environment"])
    if differing:
        raise ValueError(f"baseline and consistent sides differ in environment ({', '.join(differing)}): "
                         "not a fair comparison")
    if hellos["baseline"]["fast_content_hash"] != frozen["content_hash"]:
        raise ValueError(f"the fast path at {frozen['commit'][:12]} hashes to "
                         f"{hellos['baseline']['fast_content_hash']}, not the frozen "
                         f"{frozen['content_hash']}")


def environment_differences(baseline: dict, consistent: dict) -> list:
    """The environment fields that differ, or that FAIR_ENVIRONMENT needs and a side lacks."""
    missing = [f"{key} (not reported)" for key in FAIR_ENVIRONMENT if key not in baseline or key not in consistent]
    shared = sorted(set(baseline) & set(consistent))
    return missing + [f"{key}: {baseline[key]!r} vs {consistent[key]!r}" for key in shared
                      if baseline[key] != consistent[key]]


def interleave(workers: dict, pairs: int, samples_path: Path) -> list:
    """A B A B ... for `pairs` pairs; each sample is on disk before the next one starts."""
    samples = []
    with samples_path.open("w") as sink:
        for pair in range(pairs):
            for side in SIDES:
                sample = {"pair": pair, "side": side, **workers[side].ask("sample"),
                          "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
                sink.write(json.dumps(sample, sort_keys=True) + "\n")
                sink.flush()
                samples.append(sample)
    return samples


def _series(samples: list, key: str, higher_is_better: bool) -> dict:
    """Both sides' samples, their medians and, as C10 reports it, the median of the pairs'
    ratios (> 1: consistent faster) with its order-statistic interval (the noise)."""
    values = {side: [s[key] for s in samples if s["side"] == side] for side in SIDES}
    base, cons = (statistics.median(values[side]) for side in SIDES)
    pairs = [c / b if higher_is_better else b / c for b, c in zip(values["baseline"], values["consistent"])]
    ratio, low, high, covered = median_interval(pairs)
    return {**values, "median_baseline": base, "median_consistent": cons, "pair_ratios": pairs,
            "ratio": ratio, "noise": [low, high], "noise_coverage": covered}


def summarize(samples: list, regions: dict, hellos: dict, *, model: str, workload: dict) -> dict:
    """profile.json's figures; ratio > 1 always means the consistent path is faster."""
    names = sorted(set(regions["baseline"]) | set(regions["consistent"]))
    rows = [{"region": name, "baseline_ms": regions["baseline"].get(name, 0.0),
             "consistent_ms": regions["consistent"].get(name, 0.0)} for name in names]
    for row in rows:
        row["extra_ms"] = row["consistent_ms"] - row["baseline_ms"]
    return {"model": model, "pairs": len(samples) // len(SIDES),
            "environment": hellos["consistent"]["environment"],
            "workload": {**workload, "size": "cut", "requests_digest": hellos["consistent"]["workload"]},
            "consistent": {"content_hash": hellos["consistent"]["content_hash"]},
            "rollout_tokens_per_s": _series(samples, "rollout_tokens_per_s", higher_is_better=True),
            "train_step_s": _series(samples, "train_step_s", higher_is_better=False),
            "regions": sorted(rows, key=lambda row: row["extra_ms"], reverse=True)}


def format_table(document: dict, out: Path) -> str:
    base = document["baseline"]
    lines = [f"profile: {document['model']} cut, {document['pairs']} pairs (A B A B ...), "
             f"baseline {base['ref']} @ {base['commit'][:12]} vs consistent @ {document['commit'][:12]}"
             + (" + uncommitted edits" if document["tree_dirty"] else ""),
             f"{'figure (CPU time)':<22}{'baseline':>12}{'consistent':>12}{'ratio':>8}  noise"]
    for key, label in (("rollout_tokens_per_s", "rollout tokens/s"), ("train_step_s", "train step s")):
        series = document[key]
        low, high = series["noise"]
        lines.append(f"{label:<22}{series['median_baseline']:>12.4g}{series['median_consistent']:>12.4g}"
                     f"{series['ratio']:>8.3f}  [{low:.3f}, {high:.3f}]")
    lines.append(f"{'region (1 rollout)':<22}{'base ms':>12}{'cons ms':>12}{'extra ms':>10}")
    for row in document["regions"][:MAX_REGIONS_SHOWN]:
        lines.append(f"{row['region']:<22}{row['baseline_ms']:>12.1f}{row['consistent_ms']:>12.1f}"
                     f"{row['extra_ms']:>10.1f}")
    lines.append(f"ratio: the median of the pairs' ratios, > 1: consistent faster; noise: the interval around "
                 f"it (gates/ratio_verdict.py). results: {out}")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help="model family, e.g. nemotron or qwen3")
    parser.add_argument("--pairs", type=int, default=DEFAULT_PAIRS, help="A B sample pairs")
    parser.add_argument("--num-sequences", type=int, default=DEFAULT_WORKLOAD["num_sequences"])
    parser.add_argument("--new-tokens", type=int, default=DEFAULT_WORKLOAD["new_tokens"])
    parser.add_argument("--seed", type=int, default=DEFAULT_WORKLOAD["seed"])
    parser.add_argument("--out", help="output folder (default runs/profile-<time>)")


def run(args) -> int:
    out = Path(args.out or f"runs/profile-{time.strftime('%Y%m%dT%H%M%S')}")
    workload = {"num_sequences": args.num_sequences, "new_tokens": args.new_tokens, "seed": args.seed}
    document = profile(args.model, out, pairs=args.pairs, workload=workload)
    print(format_table(document, out))
    return EXIT_OK
