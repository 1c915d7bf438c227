"""CPU cost of the batch-invariant GEMM, measured side by side in one run.

Four ways to get y = x @ w^T for M rows, at the cut and full Qwen3 shapes:
  plain      F.linear as is (batch-variant for small M on MKL)
  padded     the earlier fix: rows padded to a multiple of 8, one call (batch-variant on an
             AVX-512 Xeon, where MKL's K blocking follows M)
  tiled      kernels.ops.linear.consistent.consistent: padded rows cut into 8-row tiles, one call each
  tiled_bmm  the same tiles in one batched call (torch.bmm): cheaper, but its bits rest on
             MKL's batched GEMM reducing every batch entry as a lone call would
Each is also checked for batch invariance (every row of M equals that row inside the largest
M, bit for bit). Timings interleave the variants (A B C A B C ...) and report the median;
raw samples, the commit and the environment go to benchmarks/results/cpu_linear-<stamp>.json.

  python benchmarks/cpu_linear.py [--repeats 15]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from raw_output import provenance, write_raw  # benchmarks/ is sys.path[0] when run as a script

from kernels.ops.linear.consistent import consistent as linear_consistent
from kernels.ops.padding import pad_to_multiple

SHAPES = {"cut qkv (K=256,N=512)": (256, 512), "cut mlp (K=256,N=1536)": (256, 1536),
          "1.7b qkv (K=2048,N=4096)": (2048, 4096), "1.7b down (K=6144,N=2048)": (6144, 2048)}
ROWS = (1, 3, 8, 17, 64, 256)


TILE_ROWS = 8


def padded(x, w):
    return F.linear(pad_to_multiple(x, 0, TILE_ROWS), w)[:x.shape[0]]


def tiled_bmm(x, w):
    tiles = pad_to_multiple(x, 0, TILE_ROWS).view(-1, TILE_ROWS, x.shape[1])
    weight = w.t().unsqueeze(0).expand(tiles.shape[0], -1, -1)
    return torch.bmm(tiles, weight).reshape(-1, w.shape[0])[:x.shape[0]]


VARIANTS = {"plain": F.linear, "padded": padded,
            "tiled": lambda x, w: linear_consistent(x, w, row_multiple=TILE_ROWS), "tiled_bmm": tiled_bmm}


def is_batch_invariant(fn, w, k_dim) -> bool:
    x = torch.randn(max(ROWS), k_dim)
    full = fn(x, w).view(torch.int32)
    return all(torch.equal(fn(x[:m], w).view(torch.int32), full[:m]) for m in ROWS)


def time_call(fn, x, w, inner) -> float:
    started = time.perf_counter()
    for _ in range(inner):
        fn(x, w)
    return (time.perf_counter() - started) / inner * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    torch.manual_seed(0)
    results = {**provenance(), "samples_us": {}, "invariant": {}}
    print(f"{'shape':<28}{'M':>5}" + "".join(f"{v:>12}" for v in VARIANTS)
          + "".join(f"{v + '/plain':>16}" for v in VARIANTS if v != "plain"))
    for label, (k_dim, n_dim) in SHAPES.items():
        w = torch.randn(n_dim, k_dim)
        results["invariant"][label] = {v: is_batch_invariant(fn, w, k_dim) for v, fn in VARIANTS.items()}
        for m in ROWS:
            x = torch.randn(m, k_dim)
            inner = max(1, int(2e7 / (max(m, 8) * k_dim * n_dim)))
            samples = {v: [] for v in VARIANTS}
            for _ in range(args.repeats):
                for name, fn in VARIANTS.items():
                    samples[name].append(time_call(fn, x, w, inner))
            results["samples_us"][f"{label}|M={m}"] = samples
            med = {v: statistics.median(s) for v, s in samples.items()}
            print(f"{label:<28}{m:>5}" + "".join(f"{med[v]:>10.1f}us" for v in VARIANTS)
                  + "".join(f"{med[v] / med['plain']:>16.2f}" for v in VARIANTS if v != "plain"))
    print("batch invariant:", json.dumps(results["invariant"], indent=1))
    write_raw(results, args.out, "cpu_linear")


if __name__ == "__main__":
    main()
