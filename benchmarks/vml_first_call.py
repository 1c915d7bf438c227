"""How often a fresh process's first VML op (ATen's MKL vector math) differs from its rerun
on two intra-op threads, with and without `import kernels.ops` (which settles the dispatch:
kernels/ops/vector_math.py). Processes run one at a time: the race needs both threads on a
core, and a loaded machine shows it less. Each process's answer is saved raw.

    python3 -m benchmarks.vml_first_call --out benchmarks/results/cpu/vml [--processes 40]
"""
import argparse
import json
import subprocess
import sys

from benchmarks.raw_output import provenance, write_raw

PROBE = """
import sys, torch
if sys.argv[1] == "kernels":
    import kernels.ops  # noqa: F401
torch.set_num_threads(2)
x = torch.arange(8192, dtype=torch.float64) * 0.03  # a rope table's angles, radians
first, again = x.cos(), x.cos()
print((first.view(torch.int64) != again.view(torch.int64)).sum().item())
"""


def first_call_differences(mode: str) -> int:
    """How many of 8192 float64 cos values the first call of a fresh process got wrong."""
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--processes", type=int, default=40)
    args = parser.parse_args()
    samples = {"torch only": [], "kernels imported": []}
    for _ in range(args.processes):
        samples["torch only"].append(first_call_differences("torch"))
        samples["kernels imported"].append(first_call_differences("kernels"))
    write_raw(dict(provenance(), samples=samples), args.out, "first-call")
    for mode, counts in samples.items():
        print(f"{mode}: {sum(c > 0 for c in counts)}/{len(counts)} processes' first cos differed from its rerun")
    print(json.dumps({m: max(c) for m, c in samples.items()}), "most values differing in one process")


if __name__ == "__main__":
    main()
