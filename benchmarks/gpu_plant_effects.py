"""How much each planted CUDA fault (gates/faults_cuda.py) moves, at the kernel: fresh random
rows called once as one big call (the shipped constant) and in calls of a few rows (the
planted one), elements that differ bit for bit counted. A plant that moves nothing is no fault
a gate can be asked to catch; one that moves one element in 10^5 needs a gate that compares
10^6 elements or more. Both the activation dtype (bf16, what the runtime calls) and fp32 rows
(where every change of the sum's order shows) are measured.

    python3 benchmarks/gpu_plant_effects.py --out DIR [--rows 4096] [--small 8]
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import kernels.ops.norm.triton as norm_triton  # noqa: E402
from benchmarks.raw_output import provenance, write_raw  # noqa: E402
from gates import faults_cuda  # noqa: E402
from gates.compare import bit_view  # noqa: E402
from kernels.ops.logprob.consistent import consistent as logprob_consistent  # noqa: E402

WIDTHS = {"norm": (256, 2048, 2688), "logprob": (1024, 151936), "linear": ((256, 256), (2048, 2048))}


def differing(a, b) -> int:
    """Elements whose bits differ (integer views), NaN-safe."""
    return int((bit_view(a) != bit_view(b)).sum())


def in_calls(function, rows: int, small: int, *row_args):
    """function over row_args in calls of `small` rows, the outputs concatenated."""
    return torch.cat([function(*(t[i:i + small] for t in row_args)) for i in range(0, rows, small)])


def measure(rows: int, small: int, generator) -> list:
    records = []
    for width in WIDTHS["norm"]:
        for dtype in (torch.bfloat16, torch.float32):
            x = torch.randn(rows, width, generator=generator).to("cuda", dtype)
            w = (1 + 0.1 * torch.randn(width, generator=generator)).to("cuda", dtype)
            whole = norm_triton.launch(x, w, 1e-6)[0]
            planted = in_calls(lambda t: faults_cuda.norm_triton_lanes_by_rows(t, w, eps=1e-6)[0], rows, small, x)
            shipped_small = in_calls(lambda t: norm_triton.launch(t, w, 1e-6)[0], rows, small, x)
            records.append({"plant": "norm_triton_lanes_by_rows", "width": width, "dtype": str(dtype),
                            "elements": x.numel(), "moved": differing(whole, planted),
                            "shipped_small_moved": differing(whole, shipped_small)})
    for vocab in WIDTHS["logprob"]:
        n = min(rows, 512)
        logits = (3 * torch.randn(n, vocab, generator=generator)).to("cuda")
        targets = torch.randint(0, vocab, (n,), generator=generator).to("cuda")
        temps = torch.ones(n, device="cuda")
        whole = logprob_consistent(logits, targets, temps)
        planted = in_calls(faults_cuda.logprob_triton_block_by_rows, n, small, logits, targets, temps)
        records.append({"plant": "logprob_triton_block_by_rows", "width": vocab, "dtype": "torch.float32",
                        "elements": n, "moved": differing(whole, planted)})
    for k, n_out in WIDTHS["linear"]:
        x = torch.randn(rows, k, generator=generator).to("cuda", torch.bfloat16)
        w = (torch.randn(n_out, k, generator=generator) / k ** 0.5).to("cuda", torch.bfloat16)
        whole = faults_cuda.linear_triton_split_k_small_m(x, w, row_multiple=8)
        planted = in_calls(lambda t: faults_cuda.linear_triton_split_k_small_m(t, w, row_multiple=8), rows, small, x)
        records.append({"plant": "linear_triton_split_k_small_m", "width": k, "dtype": "torch.bfloat16",
                        "elements": whole.numel(), "moved": differing(whole, planted)})
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--small", type=int, default=8)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("n/a: the plants are the Triton kernels' and run on CUDA only", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else torch.seed() % 2**31
    records = measure(args.rows, args.small, torch.Generator().manual_seed(seed))
    write_raw({**provenance(), "seed": seed, "rows": args.rows, "small": args.small, "records": records},
              args.out, "plant_effects")
    for r in records:
        print(f"{r['plant']:34s} width {r['width']:>7} {r['dtype']:15s} moved {r['moved']:>9} of "
              f"{r['elements']:>9} ({r['moved'] / r['elements']:.2e})"
              + (f"  shipped in small calls: {r['shipped_small_moved']}" if "shipped_small_moved" in r else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
