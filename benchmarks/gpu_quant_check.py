"""Device check of the quantizers (kernels/ops/quant.py) on CUDA: every FP8 granularity and NVFP4
give the CPU's bits (int views of codes and scales), the CPU being the contract's true division.

  python3 benchmarks/gpu_quant_check.py --out DIR     (on the device; exits 1 on any mismatch)

Random inputs alone rarely reach the one case that separates a true quotient from a multiply by the
fp32 reciprocal (CUDA's kernel for a CPU-scalar divisor), so each tensor also gets planted group
maxima whose amax / 448 (FP8) or amax / 6 (NVFP4) differ between the two in fp32; the record
counts them, and the CPU-scalar division run on CUDA beside it shows that it does differ there.
"""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.raw_output import provenance  # noqa: E402
from gates.compare import bit_view  # noqa: E402
from kernels.ops import quant  # noqa: E402

GRANULARITIES = ("tensor", "token", "block_1x128", "block_128x128")


def reciprocal_differs(amax: torch.Tensor, divisor: float) -> torch.Tensor:
    """Where fp32 amax * fp32(1 / divisor) is not the fp32 quotient amax / divisor."""
    inverse = torch.tensor(1.0 / divisor, dtype=torch.float32)
    return (amax * inverse).view(torch.int32) != (amax.double() / divisor).float().view(torch.int32)


def separating_values(divisor: float, count: int, gen) -> torch.Tensor:
    """count fp32 magnitudes in [0.5, 8) whose reciprocal product and quotient by divisor differ."""
    found = []
    while sum(len(f) for f in found) < count:
        candidates = (torch.rand(4096, generator=gen) * 7.5 + 0.5).float()
        found.append(candidates[reciprocal_differs(candidates, divisor)])
    return torch.cat(found)[:count]


def planted(shape, dtype, divisor, group_cols, gen) -> torch.Tensor:
    """x on CPU with one separating magnitude per group_cols columns of every row, signs random."""
    x = torch.randn(shape, generator=gen) * 0.25
    rows, cols = x.reshape(-1, shape[-1]).shape
    starts = torch.arange(0, cols, group_cols)
    values = separating_values(divisor, rows * len(starts), gen).reshape(rows, len(starts))
    signs = torch.where(torch.rand(rows, len(starts), generator=gen) < 0.5, -1.0, 1.0)
    flat = x.reshape(rows, cols)
    flat[:, starts] = values * signs
    return flat.reshape(shape).to(dtype)


def separating_groups(x: torch.Tensor, granularity: str | None) -> int:
    """How many of x's scale groups have an amax whose quotient the reciprocal would miss."""
    x32 = x.float()
    if granularity is None:  # NVFP4: one block scale per 16 elements, from amax / 6
        amax = x32.reshape(-1, quant.NVFP4_BLOCK).abs().amax(dim=-1)
        return int(reciprocal_differs(amax, quant.E2M1_MAX).sum())
    group = quant._group_shape(x32, granularity)
    amax = x32.abs().amax() if group is None else quant._group_amax(x32, *group)
    return int(reciprocal_differs(amax.reshape(-1), quant.E4M3_MAX).sum())


def compare(name, cpu_parts, cuda_parts, planted_count) -> dict:
    differing = sum(int((bit_view(a.cpu()) != bit_view(b.cpu())).sum()) for a, b in zip(cpu_parts, cuda_parts))
    return {"case": name, "differing_elements": differing, "planted_separating_maxima": planted_count}


def run_checks(gen) -> list:
    records = []
    for shape in ((256, 512), (3, 130, 384), (1, 128)):
        for dtype in (torch.float32, torch.bfloat16):
            for granularity in GRANULARITIES:
                cols = 128 if granularity.startswith("block") else shape[-1]
                x = planted(shape, dtype, quant.E4M3_MAX, cols, gen)
                count = separating_groups(x, granularity)
                cpu, cuda = quant.fp8_quantize(x, granularity), quant.fp8_quantize(x.cuda(), granularity)
                records.append(compare(f"fp8 {granularity} {tuple(shape)} {dtype}", cpu, cuda, count))
            x = planted(shape, dtype, quant.E2M1_MAX, quant.NVFP4_BLOCK, gen)
            count = separating_groups(x, None)
            cpu, cuda = quant.nvfp4_quantize(x), quant.nvfp4_quantize(x.cuda())
            records.append(compare(f"nvfp4 {tuple(shape)} {dtype}", [cpu.codes, cpu.block_scales, cpu.global_scale],
                                   [cuda.codes, cuda.block_scales, cuda.global_scale], count))
    return records


def cpu_scalar_control(gen) -> dict:
    """The divisor as a CPU scalar on CUDA (what quant.py did before): counts the quotients that
    leave the true one; non-zero shows the planted values exercise the difference."""
    amax = separating_values(quant.E4M3_MAX, 4096, gen)
    on_cuda = amax.cuda() / torch.tensor(quant.E4M3_MAX, dtype=torch.float32)
    true = (amax.double() / quant.E4M3_MAX).float()
    differs = int((bit_view(on_cuda.cpu()) != bit_view(true)).sum())
    return {"values": len(amax), "cuda_cpu_scalar_quotient_differs": differs}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=None, help="default: a fresh one, recorded")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("n/a: no CUDA device here")
        return 0
    seed = args.seed if args.seed is not None else int(torch.seed() % 2**31)
    gen = torch.Generator().manual_seed(seed)
    records = run_checks(gen)
    record = {"seed": seed, "checks": records, "control": cpu_scalar_control(gen), **provenance()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_quant_check.json").write_text(json.dumps(record, indent=1))
    for r in records:
        print(f"{r['case']:<50} differing {r['differing_elements']:>6}  planted {r['planted_separating_maxima']}")
    print("control:", record["control"])
    mismatches = sum(r["differing_elements"] for r in records)
    print(f"{len(records)} checks, {mismatches} differing elements")
    return 1 if mismatches or not any(r["planted_separating_maxima"] for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
