"""The paged attention kernel at a decode step's shape, every launch configuration against the
KV read's bandwidth bound, bits beside times.

    python3 benchmarks/gpu_attention_decode.py --out DIR [--batch 128] [--contexts 160,406,662]

Qwen3-1.7B's attention (16 query heads over 8 KV heads of 128, bf16, pages of 16 slots
shuffled through the pool as a served engine's are): one query row per sequence at the
context's last position, as a decode step runs it, and a prefill-shaped launch (`--prefill`, 8 sequences
of 512 rows) to show what a configuration costs there. For each key block x (num_warps,
num_stages): the median of CUDA-graph replays (do_bench_cudagraph: the GPU's time,
not the host's launch path, which dominates an eager decode-sized launch) and the KV bytes
read over the copy bandwidth measured here.
The consistent contract runs one configuration in every phase, so a change of its key block
or warps is a change of its bits: each decode output is compared (int16 view) with the
configuration the tree runs now at the same key block, and the count of differing elements
is saved beside the time. `--k-loads columns,rows` also tries each key block loaded as a
[D, keys] tile as well as rows of D transposed for the dot (the tree's: the same bits must
come out), `--splits 1,2,4` the fast contract's flash-decoding at those split counts, merge
included (its bits may move: it is the fast path).
Raw samples saved with the commit and environment.
"""
import argparse
import itertools
import sys
import time
from pathlib import Path

import torch
from triton.testing import do_bench_cudagraph

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import kernels.ops.attention.triton as attention_triton  # noqa: E402
from benchmarks.gpu_rollout import copy_bandwidth  # noqa: E402
from benchmarks.raw_output import provenance, write_raw  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, PAGE = 16, 8, 128, 16


def paged_case(batch: int, context: int, rows_per_seq: int, generator, device):
    """q rows, the pools and (segments, table) of `batch` sequences of `context` keys whose
    last `rows_per_seq` positions are queried, pages shuffled over the pool."""
    pages_per_seq = -(-context // PAGE)
    order = torch.randperm(batch * pages_per_seq, generator=generator)
    table = order.view(batch, pages_per_seq).to(device=device, dtype=torch.int32)
    keys, values = (torch.randn(batch * pages_per_seq * PAGE, KV_HEADS, HEAD_DIM, generator=generator)
                    .to(device, torch.bfloat16) for _ in range(2))
    q = torch.randn(batch * rows_per_seq, HEADS, HEAD_DIM, generator=generator).to(device, torch.bfloat16)
    rows = torch.arange(batch, device=device) * rows_per_seq
    segments = (rows, torch.full_like(rows, rows_per_seq), torch.full_like(rows, context - rows_per_seq))
    return q, keys, values, segments, table, rows_per_seq


def run(case, block_kv: int, launch: tuple, k_load: str = "rows", splits: int = 1):
    """The walk (splits 1) or the fast contract's flash-decoding with its merge (splits > 1,
    32 tokens a split at least, as the fast contract pins)."""
    q, keys, values, segments, table, rows_per_seq = case  # no host sync: graph replays time it
    attention_triton.LAUNCH_TABLE[(HEAD_DIM, torch.bfloat16)] = launch
    attention_triton.K_LOAD = k_load
    if splits > 1:
        acc, m, sums = attention_triton._launch(q, keys, values, scale=HEAD_DIM ** -0.5, block_kv=block_kv,
                                                segments=segments, table=table, page_size=PAGE,
                                                max_tokens=rows_per_seq, splits=(32, splits))
        return attention_triton.merged_splits(acc, m, sums, q.dtype)
    return attention_triton._launch(q, keys, values, scale=HEAD_DIM ** -0.5, block_kv=block_kv, segments=segments,
                                    table=table, page_size=PAGE, max_tokens=rows_per_seq)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--contexts", default="160,406,662")
    parser.add_argument("--block-kv", default="16,32,64,128")
    parser.add_argument("--warps", default="2,4,8")
    parser.add_argument("--stages", default="2,3,4")
    parser.add_argument("--k-loads", default="rows", help="columns,rows: how a key block is loaded")
    parser.add_argument("--splits", default="1", help="flash-decoding split counts (the fast contract's; 1: the walk)")
    parser.add_argument("--prefill", default="8x512", help="SEQUENCESxROWS of the prefill-shaped launch")
    parser.add_argument("--device", default="cuda", help="cpu: TRITON_INTERPRET=1, tiny sizes, a smoke test")
    args = parser.parse_args()
    device, generator = args.device, torch.Generator().manual_seed(0)
    now = attention_triton.LAUNCH_TABLE[(HEAD_DIM, torch.bfloat16)]
    bandwidth = copy_bandwidth(device)
    record = {**provenance(), "args": vars(args), "current_launch": list(now), "bandwidth_bytes_per_s": bandwidth,
              "cells": []}
    cases = {f"decode c{c}": (paged_case(args.batch, c, 1, generator, device), args.batch * c)
             for c in map(int, args.contexts.split(","))}
    seqs, rows = map(int, args.prefill.split("x"))
    cases[f"prefill {args.prefill}"] = (paged_case(seqs, rows, rows, generator, device), None)
    blocks, warps, stages, splits = (list(map(int, a.split(","))) for a in (args.block_kv, args.warps, args.stages,
                                                                           args.splits))
    loads = args.k_loads.split(",")
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s; the tree runs (warps, stages) = {now}")
    print(f"{'case':<15}{'block':>6}{'warps':>6}{'stages':>7}{'load':>8}{'splits':>7}{'us':>9}{'x bound':>9}"
          f"{'bits moved':>11}")
    for name, (case, keys_read) in cases.items():
        reference = {b: run(case, b, now) for b in blocks}
        for block_kv, num_warps, num_stages, k_load, split in itertools.product(blocks, warps, stages, loads, splits):
            started = time.perf_counter()
            out = run(case, block_kv, (num_warps, num_stages), k_load, split)
            moved = int((out.view(torch.int16) != reference[block_kv].view(torch.int16)).sum())
            samples = (do_bench_cudagraph(lambda: run(case, block_kv, (num_warps, num_stages), k_load, split),
                                          return_mode="all")
                       if device == "cuda" else [1e3 * (time.perf_counter() - started)])
            us = 1e3 * sorted(samples)[len(samples) // 2]
            bound_us = None if keys_read is None else 1e6 * keys_read * KV_HEADS * HEAD_DIM * 2 * 2 / bandwidth
            record["cells"].append({"case": name, "block_kv": block_kv, "num_warps": num_warps,
                                    "num_stages": num_stages, "k_load": k_load, "splits": split, "us": us,
                                    "bound_us": bound_us, "bits_moved_vs_current": moved, "samples_ms": samples})
            ratio = f"{us / bound_us:9.2f}" if bound_us else f"{'-':>9}"
            print(f"{name:<15}{block_kv:>6}{num_warps:>6}{num_stages:>7}{k_load:>8}{split:>7}{us:>9.1f}{ratio}"
                  f"{moved:>11}", flush=True)
    attention_triton.LAUNCH_TABLE[(HEAD_DIM, torch.bfloat16)] = now
    attention_triton.K_LOAD = "rows"
    write_raw(record, args.out, "gpu_attention_decode")
    return 0


if __name__ == "__main__":
    sys.exit(main())
