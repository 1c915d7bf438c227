"""Cost of the layouts' fixed arithmetic against the transport's own reduction, side by side in
one run: gloo over loopback on the CPU (1 thread per rank), NCCL with one GPU per rank
(--device cuda).

TP, a row-parallel layer y[M, N] = x[M, K] @ w[N, K]^T with K split over the TP ranks:
  tree             K cut into 4 leaves, one fp32 GEMM per leaf, the rank's leaves added, the
                   ranks' fp32 roots all-gathered and added in the fixed tree, rounded once
                   (the consistent contract)
  all_reduce       one GEMM over the rank's K slice, rounded to bf16, then all_reduce (fast)
  tree_comm        the communication alone: all-gather of fp32 [M, N] roots + the tree
  all_reduce_comm  all_reduce of the same fp32 [M, N] partial
EP, the routed experts of one MoE layer, the experts split over the EP ranks:
  routing_order    tokens dispatched by all-to-all in routing order, outputs returned the same
                   way, the token blocks all-gathered (consistent)
  rank_order       each rank runs its experts on every pair that chose them, the bf16 partial
                   combined by all_reduce (fast)
  routing_comm     routing_order with the experts replaced by the identity: two all-to-alls
                   and the all-gather of [M, k, H]
  all_reduce_comm  all_reduce of a bf16 [M, H] partial
Variants interleave (A B C D A B C D ...); medians per case, rank 0's clock; raw samples, the
commit and the environment go to benchmarks/results/layout_comm-<device>-<stamp>.json.

  python benchmarks/layout_comm.py [--device cpu|cuda] [--repeats 11] [--degrees 2,4]
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist
from raw_output import provenance, write_raw  # benchmarks/ is sys.path[0] when run as a script

from kernels.contract import load_contract
from kernels.contract.identity import deployment_fingerprint
from kernels.layout.expert_parallel import local_experts, rank_order_combine, routed_experts
from kernels.layout.groups import build_groups
from kernels.layout.launch import run_processes
from kernels.layout.layout import Layout
from kernels.layout.policy import LayoutPolicy
from kernels.layout.tensor_parallel import row_parallel
from kernels.layout.tree import tree_sum

TP_SHAPES = {
    "cpu": {"cut o_proj (K=256,N=256)": (256, 256), "cut down (K=768,N=256)": (768, 256),
            "1.7b o_proj (K=2048,N=2048)": (2048, 2048), "1.7b down (K=6144,N=2048)": (6144, 2048)},
    "cuda": {"nemotron o_proj (K=4096,N=2688)": (4096, 2688), "nemotron shared down (K=3712,N=2688)": (3712, 2688),
             "1.7b down (K=6144,N=2048)": (6144, 2048)},
}
TP_ROWS = {"cpu": (1, 8, 64, 256), "cuda": (1, 64, 1024, 8192)}
EP_SHAPES = {"cpu": {"cut MoE (H=256,I=128,E=16,k=4)": (256, 128, 16, 4)},
             "cuda": {"nemotron MoE (H=2688,I=1856,E=128,k=6)": (2688, 1856, 128, 6)}}
EP_ROWS = {"cpu": (8, 64, 256), "cuda": (64, 1024, 8192)}
GPU_INNER = 10


def _inner(device: str, work: float) -> int:
    """Calls per sample: fixed on the GPU; on the CPU about 40 ms of arithmetic per sample.
    The same on every rank (the collectives must pair up)."""
    return GPU_INNER if device == "cuda" else max(2, int(4e7 / (work + 2e5)))


def _time(fn, inner: int, device: str) -> float:
    dist.barrier()
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(inner):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / inner * 1e6


def _sample(variants: dict, repeats: int, inner: int, device: str) -> dict:
    for fn in variants.values():
        fn()  # warm-up: kernels compiled, communicators made
    runs = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            runs[name].append(_time(fn, inner, device))
    return runs


def _tp_variants(axis, op, x, w, partial):
    tree = load_contract("consistent").layout
    plain = LayoutPolicy("rank_order", "rank_order", "rank_order")
    return {"tree": lambda: row_parallel(op, x, w, axis=axis, policy=tree),
            "all_reduce": lambda: row_parallel(op, x, w, axis=axis, policy=plain),
            "tree_comm": lambda: tree_sum(axis.gather(partial)).to(torch.bfloat16),
            "all_reduce_comm": lambda: axis.all_reduce(partial).to(torch.bfloat16)}


def _identity_experts(rows, ids, weights, up, down):
    return rows[:, None]


def _ep_variants(axis, contract, x, ids, weights, up, down):
    experts = contract.op("expert_gemm", "engine_prefill")
    combine = contract.op("moe_combine", "engine_prefill")
    shared = torch.zeros_like(x)
    partial = torch.randn_like(x)
    return {"routing_order": lambda: combine(routed_experts(experts, x, ids, weights, up, down, axis=axis),
                                             ids, weights, shared),
            "rank_order": lambda: rank_order_combine(
                combine, local_experts(experts, x, ids, weights, up, down, axis=axis), ids, weights, shared, axis=axis),
            "routing_comm": lambda: routed_experts(_identity_experts, x, ids, weights, up, down, axis=axis),
            "all_reduce_comm": lambda: axis.all_reduce(partial)}


def _worker(rank, degree, repeats, device):
    groups = build_groups(Layout(tp=degree))
    place = groups.device
    contract = load_contract("consistent")
    op = contract.op("o_proj", "engine_prefill")
    seeded = torch.Generator().manual_seed
    samples = {}
    for label, (k_dim, n_dim) in TP_SHAPES[device].items():
        w = (0.05 * torch.randn(n_dim, k_dim, generator=seeded(1))).to(torch.bfloat16).to(place)
        for m in TP_ROWS[device]:
            x = torch.randn(m, k_dim, generator=seeded(2)).to(torch.bfloat16).to(place)
            partial = torch.randn(m, n_dim, generator=seeded(3)).to(place)
            inner = _inner(device, max(m, 8) * k_dim * n_dim / degree)
            samples[f"TP|{label}|M={m}|{degree}"] = _sample(_tp_variants(groups.tp, op, x, w, partial),
                                                            repeats, inner, device)
    ep_groups = build_groups(Layout(ep=degree))
    for label, (hidden, inter, experts, top_k) in EP_SHAPES[device].items():
        up = (0.05 * torch.randn(experts, inter, hidden, generator=seeded(4))).to(torch.bfloat16).to(place)
        down = (0.05 * torch.randn(experts, hidden, inter, generator=seeded(5))).to(torch.bfloat16).to(place)
        for m in EP_ROWS[device]:
            x = torch.randn(m, hidden, generator=seeded(6)).to(torch.bfloat16).to(place)
            ids = torch.rand(m, experts, generator=seeded(7)).topk(top_k, dim=-1).indices.to(place)
            weights = torch.rand(m, top_k, generator=seeded(8)).softmax(dim=-1).to(place)
            inner = _inner(device, m * top_k * 2 * hidden * inter / degree)
            variants = _ep_variants(ep_groups.ep, contract, x, ids, weights, up, down)
            samples[f"EP|{label}|M={m}|{degree}"] = _sample(variants, repeats, inner, device)
    return {"samples_us": samples, "comm": groups.comm}


def _print(key: str, runs: dict) -> None:
    med = {name: statistics.median(s) for name, s in runs.items()}
    kind, label, m, degree = key.split("|")
    whole, plain, comm, plain_comm = runs  # variant order: ours, theirs, ours' comm, theirs' comm
    print(f"{kind:<3}{label:<40}{m[2:]:>6}{degree:>3}{med[whole]:>11.1f}{med[plain]:>11.1f}"
          f"{med[whole] / med[plain]:>7.2f}{med[comm]:>11.1f}{med[plain_comm]:>11.1f}"
          f"{med[comm] / med[plain_comm]:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--degrees", default="2,4", help="TP and EP degrees to run (one rank per process/GPU)")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    backend = "nccl" if args.device == "cuda" else "gloo"
    degrees = [int(d) for d in args.degrees.split(",")]
    if args.device == "cuda":
        degrees = [d for d in degrees if d <= torch.cuda.device_count()]
        print(f"degrees run: {degrees} ({torch.cuda.device_count()} GPUs here)")
    results = {**provenance(),
               "device": args.device, "samples_us": {}, "repeats": args.repeats,
               "threads_per_rank": 1, "inner_calls_gpu": GPU_INNER}
    print(f"{'':<3}{'case':<40}{'M':>6}{'deg':>3}{'ours us':>11}{'theirs us':>11}{'ratio':>7}"
          f"{'ours comm':>11}{'their comm':>11}{'ratio':>7}   (medians; ours = tree / routing order)")
    for degree in degrees:
        run = run_processes(_worker, degree, degree, args.repeats, args.device, backend=backend)
        results["environment"] = deployment_fingerprint(**run["comm"])
        results["samples_us"].update(run["samples_us"])
        for key, runs in run["samples_us"].items():
            _print(key, runs)
    write_raw(results, args.out, f"layout_comm-{args.device}")


if __name__ == "__main__":
    main()
