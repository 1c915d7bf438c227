"""Writes a tuned launch table (kernels/ops/gemm_tuning.py) from a benchmarks/gpu_gemm.py
sweep: per weight shape (N, K) and swept M, the fastest one-slice variant whose bits equalled
the reference rows; M buckets run up to each swept M, the last bucket open, and neighbouring
buckets with the same winner merged. A default table, for shapes the sweep did not time, takes
per M the variant with the best geometric-mean speed over all swept shapes.

  python benchmarks/gemm_tune.py DIR/gpu_gemm.json [LATER.json ...] --out kernels/ops/tuned/gemm-nvidia-h200.json

Several sweeps: a later one replaces the earlier ones at every (shape, M) it timed, whole (its
variants there, not mixed with an earlier run's timings), so a focused re-sweep of a few
shapes and M updates a full one.
"""
import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kernels.ops import gemm_tuning  # noqa: E402


def _tableable(sample) -> bool:
    """A timed one-slice variant: a table may change the tile and load path, never the K split."""
    run = sample.get("run")
    return "error" not in sample and bool(run) and run["num_splits"] == 1 and not run["parallel_splits"]


def winners(samples: list) -> dict:
    """{(N, K): {M: fastest bit-checked sample}}."""
    best = {}
    for sample in samples:
        if not _tableable(sample) or not sample["bits_equal_rows_of_largest_M"]:
            continue
        per_m = best.setdefault((sample["N"], sample["K"]), {})
        if sample["M"] not in per_m or sample["ms"] < per_m[sample["M"]]["ms"]:
            per_m[sample["M"]] = sample
    return best


def _choice(run) -> tuple:
    return run["kernel"], tuple(run["config"]), run["block_k"]


def _buckets(choice_per_m: dict) -> list:
    """[[largest M, kernel, config, block_k], ...]: one bucket per swept M, neighbours with the
    same choice merged, the last bucket open."""
    rows = []
    for m in sorted(choice_per_m):
        kernel, config, block_k = choice_per_m[m]
        choice = [kernel, list(config), block_k]
        if rows and rows[-1][1:] == choice:
            rows[-1][0] = m  # the same winner as the bucket below: one bucket
        else:
            rows.append([m] + choice)
    rows[-1][0] = None
    return rows


def table(samples: list) -> dict:
    return {f"{n}x{k}": _buckets({m: _choice(sample["run"]) for m, sample in per_m.items()})
            for (n, k), per_m in sorted(winners(samples).items())}


def default_rows(samples: list) -> list:
    """For shapes the sweep did not time: per swept M, the variant with the best geometric mean
    of cuBLAS time / ours over every shape swept at that M, among variants timed, and bit-exact,
    on all of them (sweeps of different shapes at different M each count where they ran)."""
    shapes = {}  # M -> the shapes timed there
    for sample in samples:
        if "run" in sample:
            shapes.setdefault(sample["M"], set()).add((sample["N"], sample["K"]))
    speedups = {}  # (M, choice) -> {shape: cuBLAS / ours}
    for sample in filter(_tableable, samples):
        ratio = sample["cublas_ms"] / sample["ms"] if sample["bits_equal_rows_of_largest_M"] else None
        speedups.setdefault((sample["M"], _choice(sample["run"])), {})[(sample["N"], sample["K"])] = ratio
    best = {}
    for (m, choice), per_shape in speedups.items():
        if set(per_shape) != shapes[m] or None in per_shape.values():
            continue
        score = math.exp(sum(math.log(r) for r in per_shape.values()) / len(per_shape))
        if m not in best or score > best[m][0]:
            best[m] = (score, choice)
    return _buckets({m: choice for m, (_, choice) in best.items()})


def merged(sweeps: list) -> list:
    """The samples of several sweeps' sample lists, in order: each (N, K, M) from the last
    sweep that timed it."""
    latest = {}
    for index, samples in enumerate(sweeps):
        for sample in samples:
            if "N" in sample:
                latest[(sample["N"], sample["K"], sample["M"])] = index
    return [sample for index, samples in enumerate(sweeps) for sample in samples
            if "N" in sample and latest[(sample["N"], sample["K"], sample["M"])] == index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("samples", nargs="+", help="gpu_gemm.json of variant sweeps, later ones replacing earlier")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    sweeps = [json.loads(Path(path).read_text()) for path in args.samples]
    devices = {sweep["environment"]["gpu"] for sweep in sweeps}
    if len(devices) != 1:
        raise SystemExit(f"sweeps from different devices: {sorted(devices)}")
    samples, environment = merged([sweep["samples"] for sweep in sweeps]), sweeps[-1]["environment"]
    commits = ", ".join(dict.fromkeys(str(sweep["environment"].get("commit")) for sweep in sweeps))
    document = {"device": environment["gpu"], "triton": environment["triton"], "torch": environment["torch"],
                "source": f"benchmarks/gemm_tune.py over gpu_gemm.py sweeps (commits {commits}, "
                          "later replacing earlier)",
                "shapes": table(samples), "default": default_rows(samples)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
    gemm_tuning.load(Path(args.out))  # the table it wrote parses as the launch code reads it
    print(f"wrote {args.out}: {len(document['shapes'])} shapes")


if __name__ == "__main__":
    main()
