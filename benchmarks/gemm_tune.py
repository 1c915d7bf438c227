"""Writes a tuned launch table (kernels/ops/gemm_tuning.py) from a benchmarks/gpu_gemm.py
sweep: per weight shape (N, K) and swept M, the fastest one-slice variant whose bits equalled
the reference rows; M buckets run up to each swept M, the last bucket open, and neighbouring
buckets with the same winner merged.

  python benchmarks/gemm_tune.py DIR/gpu_gemm.json --out kernels/ops/tuned/gemm-nvidia-h200.json
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kernels.ops import gemm_tuning  # noqa: E402


def winners(samples: list) -> dict:
    """{(N, K): {M: fastest bit-checked sample}}."""
    best = {}
    for sample in samples:
        run = sample.get("run")
        if "error" in sample or not run or run["num_splits"] != 1 or run["parallel_splits"]:
            continue
        if not sample["bits_equal_rows_of_largest_M"]:
            continue
        per_m = best.setdefault((sample["N"], sample["K"]), {})
        if sample["M"] not in per_m or sample["ms"] < per_m[sample["M"]]["ms"]:
            per_m[sample["M"]] = sample
    return best


def table(samples: list) -> dict:
    shapes = {}
    for (n, k), per_m in sorted(winners(samples).items()):
        rows = []
        for m in sorted(per_m):
            run = per_m[m]["run"]
            choice = [run["kernel"], list(run["config"]), run["block_k"]]
            if rows and rows[-1][1:] == choice:
                rows[-1][0] = m  # the same winner as the bucket below: one bucket
            else:
                rows.append([m] + choice)
        rows[-1][0] = None
        shapes[f"{n}x{k}"] = rows
    return shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("samples", help="gpu_gemm.json from a variant sweep")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    data = json.loads(Path(args.samples).read_text())
    environment = data["environment"]
    document = {"device": environment["gpu"], "triton": environment["triton"], "torch": environment["torch"],
                "source": f"benchmarks/gemm_tune.py over a gpu_gemm.py sweep (commit {environment.get('commit')})",
                "shapes": table(data["samples"])}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
    gemm_tuning.load(Path(args.out))  # the table it wrote parses as the launch code reads it
    print(f"wrote {args.out}: {len(document['shapes'])} shapes")


if __name__ == "__main__":
    main()
