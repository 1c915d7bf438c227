"""Device check and timing of the routed experts on CUDA (kernels/ops/expert_gemm/cuda.py), one call.

Bits (int views; exits 1 on a mismatch): the consistent grouped experts equal the per-expert
loop of linear.consistent for every token count, and the first 7 tokens' rows equal the same
tokens run alone (the tile height follows the batch; the bits may not). Backward (--backward):
the grouped kernels' dx, d_up, d_down equal themselves run to run, their error against the
per-expert loop's autograd in float64 is recorded, and fwd+bwd is timed against the loop. Timing (do_bench,
medians printed, raw samples saved): consistent grouped vs consistent loop, fast grouped
(torch._grouped_mm) vs fast loop (cuBLAS per expert), at the Nemotron-3-Nano shape.

  python3 benchmarks/gpu_moe_check.py --out DIR [--seed N]
"""
import argparse
import functools
import json
import random
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import kernels.ops.expert_gemm.cuda as moe_cuda  # noqa: E402
import kernels.ops.expert_gemm.fast_cuda as moe_fast_cuda  # noqa: E402
from benchmarks.raw_output import provenance  # noqa: E402
from gates.compare import first_bit_difference  # noqa: E402
from kernels.ops.expert_gemm.consistent import experts_loop  # noqa: E402
from kernels.ops.expert_gemm.fast import _relu2, experts_fast_loop  # noqa: E402
from kernels.ops.expert_gemm.forms import _routing_groups  # noqa: E402
from kernels.ops.linear.consistent import consistent as linear_consistent  # noqa: E402
from kernels.ops.relu2_mlp.consistent import _relu2_once  # noqa: E402

SHAPE = dict(hidden=2688, inner=1856, experts=128, top_k=6)  # nemotron-30b-a3b's MoE
TOKENS = (1, 3, 16, 64, 256, 1024, 4096)


def _loop_consistent(x, ids, up, down):
    """experts_consistent's per-expert loop, run on the GPU with linear.consistent per expert."""
    return experts_loop(x, ids, up, down, functools.partial(linear_consistent, row_multiple=8))


def _gradients(fn, x, up, down, weight):
    leaves = [t.detach().clone().requires_grad_() for t in (x, up, down)]
    (fn(*leaves).float() * weight).sum().backward()
    return [t.grad for t in leaves]


def check_backward(x, ids, up, down, gen) -> tuple:
    """(records, mismatches): grouped gradients run to run, error vs the loop in float64, timing."""
    weight = torch.randn(ids.shape + (down.shape[1],), device="cuda", generator=gen)

    def grouped(xx, uu, dd):
        return moe_cuda.experts(xx, ids, uu, dd, _relu2_once)

    def loop64(xx, uu, dd):  # the experts' math in float64 torch ops
        out = xx.new_zeros(ids.shape + (dd.shape[1],))
        for expert, (rows, slots) in _routing_groups(ids, uu.shape[0]).items():
            out[rows, slots] = (torch.relu(xx[rows] @ uu[expert].T) ** 2) @ dd[expert].T
        return out
    first, second = _gradients(grouped, x, up, down, weight), _gradients(grouped, x, up, down, weight)
    reference = _gradients(loop64, x.double(), up.double(), down.double(), weight.double())
    names = ("dx", "d_up", "d_down")
    repeat = {n: str(first_bit_difference(a, b) or "identical") for n, a, b in zip(names, first, second)}
    error = {n: float((a.double() - r).abs().max() / r.abs().max()) for n, a, r in zip(names, first, reference)}
    samples = {"grouped_fwd_bwd": triton.testing.do_bench(lambda: _gradients(grouped, x, up, down, weight),
                                                          warmup=5, rep=50, return_mode="all"),
               "loop_fwd_bwd": triton.testing.do_bench(
                   lambda: _gradients(lambda *t: _loop_consistent(*t[:1], ids, *t[1:]), x, up, down, weight),
                   warmup=2, rep=20, return_mode="all")}
    med = {k: sorted(v)[len(v) // 2] for k, v in samples.items()}
    print(f"backward, {x.shape[0]} tokens: run to run {repeat}; max error vs float64 loop (relative) "
          f"{ {k: f'{v:.1e}' for k, v in error.items()} }; fwd+bwd grouped {med['grouped_fwd_bwd']:.2f} ms, "
          f"loop {med['loop_fwd_bwd']:.2f} ms")
    mismatches = sum(v != "identical" for v in repeat.values())
    return {"tokens": x.shape[0], "run_to_run": repeat, "relative_error_vs_float64_loop": error,
            "samples_ms": samples}, mismatches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--seed", type=int, default=random.SystemRandom().randrange(2 ** 31))
    parser.add_argument("--backward", default="256", help="token counts for the backward check ('' for none)")
    args = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    hidden, inner, experts, top_k = SHAPE["hidden"], SHAPE["inner"], SHAPE["experts"], SHAPE["top_k"]
    up = (torch.randn(experts, inner, hidden, device="cuda", generator=gen) * 0.02).to(torch.bfloat16)
    down = (torch.randn(experts, hidden, inner, device="cuda", generator=gen) * 0.02).to(torch.bfloat16)
    largest = max(TOKENS)
    x_all = torch.randn(largest, hidden, device="cuda", generator=gen).to(torch.bfloat16)
    ids_all = torch.rand(largest, experts, device="cuda", generator=gen).topk(top_k, dim=-1).indices
    w_all = torch.rand(largest, top_k, device="cuda", generator=gen).softmax(-1)
    head = moe_cuda.experts(x_all[:7], ids_all[:7], up, down, _relu2_once)
    records, failures = [], 0
    print(f"{'tokens':>7}{'grouped==loop':>15}{'head==alone':>13}{'cons grouped':>14}{'cons loop':>11}"
          f"{'fast grouped':>14}{'fast loop':>11}   (us, medians)")
    for tokens in TOKENS:
        x, ids, weights = x_all[:tokens], ids_all[:tokens], w_all[:tokens]
        grouped = moe_cuda.experts(x, ids, up, down, _relu2_once)
        same = first_bit_difference(grouped, _loop_consistent(x, ids, up, down))
        head_same = first_bit_difference(grouped[:7], head[:tokens]) if tokens >= 7 else None
        failures += (same is not None) + (head_same is not None)
        fns = {"consistent_grouped": lambda: moe_cuda.experts(x, ids, up, down, _relu2_once),
               "consistent_loop": lambda: _loop_consistent(x, ids, up, down),
               "fast_grouped": lambda: moe_fast_cuda.experts_fast(x, ids, weights, up, down, activation=_relu2),
               "fast_loop": lambda: experts_fast_loop(x, ids, weights, up, down)}
        samples = {name: triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="all") for name, fn in fns.items()}
        med = {name: sorted(s)[len(s) // 2] * 1000 for name, s in samples.items()}
        records.append({"tokens": tokens, "grouped_vs_loop": str(same) if same else "identical",
                        "head_vs_alone": str(head_same) if head_same else "identical", "samples_ms": samples})
        print(f"{tokens:>7}{'yes' if same is None else 'NO':>15}{'yes' if head_same is None else 'NO':>13}"
              f"{med['consistent_grouped']:>14.1f}{med['consistent_loop']:>11.1f}{med['fast_grouped']:>14.1f}"
              f"{med['fast_loop']:>11.1f}")
    backward = []
    for tokens in [int(t) for t in args.backward.split(",") if t]:
        record, mismatches = check_backward(x_all[:tokens], ids_all[:tokens], up, down, gen)
        backward.append(record)
        failures += mismatches
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_moe_check.json").write_text(json.dumps(
        {**provenance(), "seed": args.seed, "shape": SHAPE, "records": records, "backward": backward},
        indent=1))
    print(f"seed {args.seed}; {failures} bit mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
