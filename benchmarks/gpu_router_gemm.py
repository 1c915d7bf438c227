"""The consistent fp32 GEMM (the MoE router's) on CUDA: bits across M and tiles, and time.

    python3 benchmarks/gpu_router_gemm.py --out DIR [--n 128] [--k 2688]

x [M, K] and w [N, K] fp32 from fresh random bf16 values (as the router converts them). Bits:
every M of the sweep, through linear_cuda.forward's launch table, gives the rows of the
largest M bit for bit (int32 views), and so does every fp32 tile of the table forced at every
M. Time: do_bench's samples of the table's launch and of each tile at the decode's M, beside
torch.matmul in fp32 (TF32 off). Exit 1 when a bit differs. The weight read is the roofline.
"""
import argparse
import sys
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import kernels.ops.linear.cuda as linear_cuda  # noqa: E402
import kernels.ops.linear.triton as linear_triton  # noqa: E402
from benchmarks.raw_output import provenance, write_raw  # noqa: E402

M_SWEEP = (1, 3, 16, 64, 128, 256, 257, 1000, 2048, 2049, 8192)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--k", type=int, default=2688)
    parser.add_argument("--decode-m", default="64,128,256")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ())))
    x_all = torch.randn(max(M_SWEEP), args.k, device="cuda", generator=gen).bfloat16().float()
    w = (torch.randn(args.n, args.k, device="cuda", generator=gen) / args.k ** 0.5).bfloat16().float()
    reference = linear_cuda.forward(x_all, w)
    differing = []
    for m in M_SWEEP:
        runs = [("table", lambda x: linear_cuda.forward(x, w))] + [
            (f"{c}/k{bk}", lambda x, c=c, bk=bk: linear_triton.consistent(x, w, config=c, block_k=bk))
            for _, _, c, bk in linear_cuda._FP32_TILES]
        for label, gemm in runs:
            count = int((gemm(x_all[:m].contiguous()).view(torch.int32) != reference[:m].view(torch.int32)).sum())
            if count:
                differing.append({"M": m, "run": label, "differing": count})
    timings = []
    for m in (int(v) for v in args.decode_m.split(",")):
        x = x_all[:m].contiguous()
        row = {"M": m, "launch": list(linear_cuda._launch(m, args.n, args.k, torch.float32, x.device)),
               "table_ms": do_bench(lambda: linear_cuda.forward(x, w), return_mode="all"),
               "torch_fp32_ms": do_bench(lambda: x @ w.T, return_mode="all"),
               "tiles_ms": {f"{c}/k{bk}": do_bench(lambda c=c, bk=bk: linear_triton.consistent(
                   x, w, config=c, block_k=bk), return_mode="all") for _, _, c, bk in linear_cuda._FP32_TILES}}
        timings.append(row)
    roofline_us = args.n * args.k * 4 / 4.2e12 * 1e6
    write_raw({"n": args.n, "k": args.k, "m_sweep": M_SWEEP, "differing": differing, "timings": timings,
               "weight_read_roofline_us": roofline_us, **provenance()}, args.out, "gpu_router_gemm")
    med = lambda samples: sorted(samples)[len(samples) // 2] * 1e3  # noqa: E731
    print(f"N {args.n} K {args.k}: weight read roofline {roofline_us:.1f} us; differing: {differing or 'none'}")
    for row in timings:
        tiles = ", ".join(f"{label} {med(s):.1f}" for label, s in row["tiles_ms"].items())
        print(f"  M {row['M']}: table {med(row['table_ms']):.1f} us ({row['launch']}); torch fp32 "
              f"{med(row['torch_fp32_ms']):.1f} us; tiles {tiles}")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
