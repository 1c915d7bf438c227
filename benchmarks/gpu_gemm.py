"""Consistent Triton GEMM (kernels/ops/linear/triton.py) vs cuBLAS (torch.matmul) on the
models' shapes, M = 1..16384, bf16; every result checked bit for bit: each M's rows against
the same rows computed inside the largest M, under every tile config tried (the tile may
follow M, the K order may not), plus the relative error against a float64 reference.

  python benchmarks/gpu_gemm.py --out DIR                 (variants; on the device; one table last)
  python benchmarks/gpu_gemm.py --out DIR --launch-table  (what the models run: the done-when figure)

Per shape and split count (a fixed number of K slices, the same for every M), each M is timed
under the tile configs of its size classes; the best one is reported against cuBLAS timed the
same way: triton.testing.do_bench_cudagraph medians, the calls replayed from a CUDA graph as
the engine's decode runs them, so the figure is GPU time and not Python launch overhead
(eager do_bench put a ~70 us host floor under small-M calls: recorded in
results/h200/gemm/tma-sweep-eager-69bf063.json); weights rotated over several copies so
the L2 cache does not hold them. Raw samples, the environment and the commit go to DIR/gpu_gemm.json.
"""
import argparse
import functools
import json
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import kernels.ops.linear.cuda as linear_cuda  # noqa: E402
from benchmarks.raw_output import provenance  # noqa: E402
from kernels.ops.linear.triton import consistent  # noqa: E402

SHAPES = {  # name: (N, K)
    "qwen3-1.7b qkv": (4096, 2048), "qwen3-1.7b o_proj": (2048, 2048),
    "qwen3-1.7b gate_up": (12288, 2048), "qwen3-1.7b down": (2048, 6144),
    "nemotron attn qkv": (4608, 2688), "nemotron mamba out": (2688, 4096),
    "nemotron mamba in": (10304, 2688), "qwen3-1.7b lm_head": (151936, 2048),
    "nemotron shared up": (3712, 2688), "nemotron shared down": (2688, 3712),
}
M_CAP = {"qwen3-1.7b lm_head": 4096}  # the head's rows are the sampled ones: a float64 check of more is slow
M_SWEEP = (1, 3, 8, 16, 31, 64, 128, 256, 1024, 4096, 16384)
# size class -> (kernel, (BLOCK_M, BLOCK_N, num_warps, num_stages), BLOCK_K) candidates; the
# bits do not depend on BLOCK_K (benchmarks/gpu_gemm_block_k.py), so it may follow M. Small M
# is bound by reading w: narrow N tiles and deep K steps put more programs and more bytes in flight.
VARIANTS = {
    "small": (("pointer", (16, 64, 4, 4), 128), ("pointer", (16, 32, 2, 5), 128), ("pointer", (16, 32, 4, 4), 256),
              ("pointer", (16, 16, 4, 4), 256), ("tma", (16, 64, 4, 4), 128), ("tma", (16, 32, 4, 4), 256),
              ("tma", (16, 16, 4, 6), 256)),
    "mid": (("pointer", (64, 64, 4, 4), 128), ("pointer", (64, 32, 4, 4), 128), ("pointer", (32, 32, 4, 4), 256),
            ("pointer", (64, 16, 4, 4), 256), ("tma", (64, 64, 4, 4), 128), ("tma", (64, 32, 4, 4), 128),
            ("tma", (64, 16, 4, 5), 256), ("tma", (32, 32, 4, 4), 256), ("tma", (64, 64, 4, 3), 256)),
    "large": (("pointer", (128, 128, 8, 4), 64), ("pointer", (256, 128, 8, 3), 64), ("tma", (128, 128, 4, 4), 64),
              ("tma", (128, 256, 8, 3), 64), ("tma", (128, 128, 8, 4), 64), ("persistent", (128, 128, 4, 4), 64),
              ("persistent", (128, 256, 8, 3), 64), ("tma", (256, 128, 8, 3), 64), ("tma", (128, 64, 4, 4), 128),
              ("persistent", (128, 128, 8, 4), 64)),
    # M 65-1024 on weights of 2-12k rows: a 128 x 128 tile leaves most SMs idle (M 256 on
    # N 2048 is 32 programs), so narrower tiles and 128-row tiles with deep K steps
    "wide": (("tma", (128, 64, 4, 4), 128), ("tma", (128, 64, 8, 4), 128), ("tma", (128, 32, 4, 4), 128),
             ("tma", (128, 32, 4, 5), 128), ("tma", (64, 128, 4, 4), 64), ("tma", (64, 128, 4, 4), 128),
             ("tma", (64, 64, 4, 4), 64), ("tma", (64, 64, 4, 6), 128), ("persistent", (128, 64, 4, 4), 128),
             ("persistent", (64, 128, 4, 4), 64), ("persistent", (64, 64, 4, 5), 128),
             ("pointer", (128, 64, 8, 4), 64)),
}
SPLITS = (1,)
WEIGHT_COPIES_BYTES = 256 << 20  # rotate weights over at least this much memory (L2 is 50 MiB)


def size_classes(m: int) -> tuple:
    return ("small",) if m <= 16 else ("mid",) if m <= 64 else ("mid", "wide") if m <= 128 else \
        ("wide", "large") if m <= 1024 else ("large",)


def rotating(fn, weights):
    state = {"i": 0}

    def call():
        state["i"] = (state["i"] + 1) % len(weights)
        return fn(weights[state["i"]])
    return call


def bench_ms(fn) -> float:
    fn()  # compile and warm outside the capture
    return triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median")


def bits_equal(a, b) -> bool:
    return torch.equal(a.view(torch.int16), b.view(torch.int16))


def candidates(m: int, splits: int, launch_table: bool) -> list:
    """(label, run arguments, gemm(x, w)) triples to time at this M: linear.consistent's own launch table, or
    the size class's variants (and, with several K slices, the parallel-slice ones)."""
    if launch_table:
        return [("table", {}, linear_cuda.forward)]
    variants = dict.fromkeys(v for size in size_classes(m) for v in VARIANTS[size])  # classes overlap: each once
    runs = [dict(kernel=kernel, config=c, block_k=bk, num_splits=splits, parallel_splits=False)
            for kernel, c, bk in variants if splits == 1 or kernel == "pointer"]
    if splits > 1 and m <= 256:  # slices in parallel programs: more programs for small M
        runs += [dict(run, parallel_splits=True) for run in runs]
    return [((run["kernel"][:3],) + run["config"] + (f"k{run['block_k']}",)
             + (("par",) if run["parallel_splits"] else ()),
             run, functools.partial(consistent, **run)) for run in runs]


def run_shape(name, n, k, records, m_sweep=M_SWEEP, splits_sweep=SPLITS, launch_table=False) -> list:
    m_sweep = [m for m in m_sweep if m <= M_CAP.get(name, m)]
    generator = torch.Generator(device="cuda").manual_seed(hash(name) % 2**31)
    x_all = torch.randn(max(m_sweep), k, device="cuda", generator=generator).to(torch.bfloat16)
    w = (torch.randn(n, k, device="cuda", generator=generator) / k ** 0.5).to(torch.bfloat16)
    copies = [w] + [w.clone() for _ in range(max(1, WEIGHT_COPIES_BYTES // w.nbytes) - 1)]
    rows = []
    for splits in splits_sweep:
        reference = consistent(x_all, w, config=(128, 128, 8, 2), num_splits=splits, block_k=64)
        for m in m_sweep:
            x = x_all[:m].contiguous()
            exact = (x.double() @ w.double().T)
            cublas_ms = bench_ms(rotating(lambda ww: torch.matmul(x, ww.T), copies))
            best, invariant = None, True
            for label, run, gemm in candidates(m, splits, launch_table):
                try:
                    y = gemm(x, w)
                except Exception as error:  # a tile too large for shared memory, a load path Triton refuses
                    records.append({"shape": name, "M": m, "variant": label, "error": f"{type(error).__name__}: "
                                                                                       f"{str(error)[:300]}"})
                    continue
                same = bits_equal(y, reference[:m])
                invariant &= same
                error = float((y.double() - exact).norm() / exact.norm())
                ms = bench_ms(rotating(lambda ww: gemm(x, ww), copies))
                records.append({"shape": name, "N": n, "K": k, "M": m, "splits": splits, "variant": label,
                                "run": run, "ms": ms, "cublas_ms": cublas_ms,
                                "bits_equal_rows_of_largest_M": same, "rel_error_vs_fp64": error})
                if best is None or ms < best[1]:
                    best = (label, ms)
            rows.append((name, splits, m, best[0], best[1], cublas_ms, cublas_ms / best[1], invariant))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated names")
    parser.add_argument("--m", default=",".join(map(str, M_SWEEP)), help="comma-separated M values")
    parser.add_argument("--splits", default=",".join(map(str, SPLITS)), help="comma-separated split counts")
    parser.add_argument("--launch-table", action="store_true",
                        help="time linear.consistent's launch table (what the models run) instead of the variants")
    args = parser.parse_args()
    m_sweep, splits = [int(v) for v in args.m.split(",")], [int(v) for v in args.splits.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run = provenance()
    records, rows = [], []
    for name in args.shapes.split(","):
        rows += run_shape(name, *SHAPES[name], records, m_sweep, splits, args.launch_table)
        (out / "gpu_gemm.json").write_text(json.dumps({**run, "samples": records}, indent=1))
    print(f"{'shape':<22}{'splits':>7}{'M':>7}  {'best variant':<28}{'ours us':>9}{'cuBLAS us':>10}"
          f"{'ratio':>7}  invariant")
    for name, splits, m, config, ms, cublas_ms, ratio, invariant in rows:
        print(f"{name:<22}{splits:>7}{m:>7}  {str(config):<28}{ms * 1e3:>9.1f}{cublas_ms * 1e3:>10.1f}"
              f"{ratio:>7.2f}  {'yes' if invariant else 'NO'}")


if __name__ == "__main__":
    main()
