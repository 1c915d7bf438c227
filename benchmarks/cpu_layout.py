"""CPU cost of the fixed reduction tree against a plain all-reduce, side by side (gloo over
loopback, one process per TP rank, 1 thread each).

A row-parallel layer y[M, N] = x[M, K] @ w[N, K]^T with K split over TP ranks, two ways:
  tree        kernels/layout: K cut into 4 leaves, one fp32 GEMM per leaf, the rank's leaves
              added, the ranks' fp32 roots all-gathered and added in the fixed tree, rounded once
  all_reduce  one GEMM over the rank's K slice, rounded to bf16, then all_reduce (bf16)
and the communication alone: tree_comm (all-gather of the fp32 [M, N] roots + the tree)
against all_reduce_comm (all_reduce of the same fp32 [M, N] partial). Variants interleave
(A B C D A B C D ...); medians per (shape, M, TP); raw samples, the commit and the
environment go to benchmarks/results/cpu_layout-<stamp>.json.

  python benchmarks/cpu_layout.py [--repeats 11] [--tp 2,4]
"""
import argparse
import statistics
import subprocess
import time

import torch
import torch.distributed as dist

from raw_output import write_raw  # benchmarks/ is sys.path[0] when run as a script

from kernels.contract import load_contract
from kernels.contract.identity import deployment_fingerprint
from kernels.layout.groups import build_groups
from kernels.layout.launch import run_processes
from kernels.layout.layout import Layout
from kernels.layout.policy import LayoutPolicy
from kernels.layout.tensor_parallel import row_parallel
from kernels.layout.tree import tree_sum

SHAPES = {"cut o_proj (K=256,N=256)": (256, 256), "cut down (K=768,N=256)": (768, 256),
          "1.7b o_proj (K=2048,N=2048)": (2048, 2048), "1.7b down (K=6144,N=2048)": (6144, 2048)}
ROWS = (1, 8, 64, 256)


def _variants(axis, op, x, w, partial):
    tree = load_contract("consistent").layout
    plain = LayoutPolicy("rank_order", "rank_order", "rank_order")
    return {"tree": lambda: row_parallel(op, x, w, axis=axis, policy=tree),
            "all_reduce": lambda: row_parallel(op, x, w, axis=axis, policy=plain),
            "tree_comm": lambda: tree_sum(axis.gather(partial)).to(torch.bfloat16),
            "all_reduce_comm": lambda: axis.all_reduce(partial).to(torch.bfloat16)}


def _time(fn, inner: int) -> float:
    dist.barrier()
    started = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - started) / inner * 1e6


def _worker(rank, tp, repeats):
    groups = build_groups(Layout(tp=tp))
    op = load_contract("consistent").op("o_proj", "engine_prefill")
    samples, comm = {}, groups.comm
    for label, (k_dim, n_dim) in SHAPES.items():
        w = (0.05 * torch.randn(n_dim, k_dim, generator=torch.Generator().manual_seed(1))).to(torch.bfloat16)
        for m in ROWS:
            x = torch.randn(m, k_dim, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
            partial = torch.randn(m, n_dim)
            variants = _variants(groups.tp, op, x, w, partial)
            inner = max(2, int(4e7 / (max(m, 8) * k_dim * n_dim / tp + 2e5)))
            runs = {name: [] for name in variants}
            for _ in range(repeats):
                for name, fn in variants.items():
                    runs[name].append(_time(fn, inner))
            samples[f"{label}|M={m}|TP={tp}"] = runs
    return {"samples_us": samples, "comm": comm}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--tp", default="2,4")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    results = {"commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
               "dirty": bool(subprocess.run(["git", "status", "--porcelain", "kernels"], capture_output=True,
                                            text=True).stdout.strip()),
               "samples_us": {}, "threads_per_rank": 1, "repeats": args.repeats}
    print(f"{'shape':<28}{'M':>5}{'TP':>4}{'tree':>11}{'all_red':>11}{'ratio':>7}"
          f"{'tree_comm':>11}{'ar_comm':>10}{'ratio':>7}")
    for tp in (int(t) for t in args.tp.split(",")):
        run = run_processes(_worker, tp, tp, args.repeats)
        results["environment"] = deployment_fingerprint(**run["comm"]) | {"num_threads": 1}
        results["samples_us"].update(run["samples_us"])
        for key, runs in run["samples_us"].items():
            med = {name: statistics.median(s) for name, s in runs.items()}
            label, m, tp_text = key.split("|")
            print(f"{label:<28}{m[2:]:>5}{tp_text[3:]:>4}{med['tree']:>9.1f}us{med['all_reduce']:>9.1f}us"
                  f"{med['tree'] / med['all_reduce']:>7.2f}{med['tree_comm']:>9.1f}us{med['all_reduce_comm']:>8.1f}us"
                  f"{med['tree_comm'] / med['all_reduce_comm']:>7.2f}")
    write_raw(results, args.out, "cpu_layout")


if __name__ == "__main__":
    main()
