"""Whether Triton's libdevice exp and log give torch's CUDA bits, over every fp32 input (2^32 of them).

    python3 benchmarks/gpu_exp_bits.py --out DIR [--chunk-log2 28] [--functions exp,log]

A consistent kernel that computes exp(x - max) inside Triton can only stand in for torch's
`torch.exp` (the trainer's autograd path) if both give the same bits. Both come from NVIDIA's math
library, but Triton builds libdevice with flush-to-zero on, so a subnormal result may read 0.
Each chunk of bit patterns is viewed as fp32 on the device and sent through torch and through a
Triton kernel (libdevice, and tl.exp / tl.log for information: the fast approximations); results
are compared as int32 views, every NaN counted equal to every NaN. Mismatches are split into
"torch subnormal, Triton zero" (flush-to-zero) and the rest, with examples. Exits 1 if any
mismatch is not flush-to-zero. CUDA only (the Triton interpreter has no libdevice).
"""
import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.raw_output import provenance, write_raw  # noqa: E402

BLOCK = 1024


@triton.jit
def _apply_kernel(x_ptr, out_ptr, n, WHICH: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    if WHICH == 0:
        y = libdevice.exp(x)
    elif WHICH == 1:
        y = libdevice.log(x)
    elif WHICH == 2:
        y = tl.exp(x)
    else:
        y = tl.log(x)
    tl.store(out_ptr + offs, y, mask=mask)


KERNELS = {"exp": (torch.exp, 0, 2), "log": (torch.log, 1, 3)}  # torch form, libdevice, approximation


def _triton(x, which):
    out = torch.empty_like(x)
    _apply_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), WHICH=which, BLOCK=BLOCK)
    return out


def _compare(reference, got):
    """(mismatches, of them flush-to-zero, the mask of the others)."""
    ref_bits, got_bits = reference.view(torch.int32), got.view(torch.int32)
    differ = (ref_bits != got_bits) & ~(torch.isnan(reference) & torch.isnan(got))
    subnormal = (reference != 0) & (reference.abs() < torch.finfo(torch.float32).tiny)
    flushed = differ & subnormal & (got == 0)
    return int(differ.sum()), int(flushed.sum()), differ & ~flushed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--chunk-log2", type=int, default=28)
    parser.add_argument("--limit-log2", type=int, default=32, help="bit patterns checked: 2^this, from 0")
    parser.add_argument("--functions", default="exp,log")
    args = parser.parse_args()
    total, chunk = 1 << args.limit_log2, 1 << min(args.chunk_log2, args.limit_log2)
    results = {name: {"inputs": 0, "mismatches": 0, "flush_to_zero": 0, "other_examples": [],
                      "approximation_mismatches": 0} for name in args.functions.split(",")}
    for start in range(0, total, chunk):
        bits = torch.arange(start, start + chunk, dtype=torch.int64, device=args.device)
        x = (bits - (1 << 32) * (bits >= 1 << 31)).to(torch.int32).view(torch.float32)
        for name, record in results.items():
            form, exact, approximate = KERNELS[name]
            reference, got = form(x), _triton(x, exact)
            mismatches, flushed, other = _compare(reference, got)
            record["inputs"] += chunk
            record["mismatches"] += mismatches
            record["flush_to_zero"] += flushed
            for index in other.nonzero()[:5 - len(record["other_examples"]), 0].tolist():  # bits of x, torch, Triton
                record["other_examples"].append([int(t.view(torch.int32)[index]) for t in (x, reference, got)])
            record["approximation_mismatches"] += _compare(reference, _triton(x, approximate))[0]
        print(f"{start + chunk:>11} inputs: " + "; ".join(
            f"{n} {r['mismatches']} differ ({r['flush_to_zero']} flush-to-zero), tl.{n} {r['approximation_mismatches']}"
            for n, r in results.items()), flush=True)
    write_raw({**provenance(), "args": vars(args), "results": results}, args.out, "exp-bits")
    others = sum(r["mismatches"] - r["flush_to_zero"] for r in results.values())
    print(f"libdevice vs torch over {total} inputs: {others} mismatches besides flush-to-zero")
    return 1 if others else 0


if __name__ == "__main__":
    sys.exit(main())
