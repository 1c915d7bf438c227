"""Launches of the consistent one-row Mamba decode kernel on CUDA: bits and time, side by side.

    python3 benchmarks/gpu_ssm_decode.py --out DIR [--batches 64,128] [--config nemotron-wide-cut]

On random row pools, state pools and buffered counts (every count 0..Q-1 drawn, so every
number of s-blocks occurs, Q-1 included), at the config's Mamba widths: the output of
ssm_scan/decode_triton.py's decode_rows under each launch (P-block, loop unroll, warps, vector) against
the block kernel (_chunk_outputs_kernel, one 32-row block per sequence: the arithmetic the row
kernel restates), bit for bit (int32 views); then the time of each launch and of the whole batched
decode (cumsum, row, state fold), triton.testing.do_bench, raw samples saved. A launch whose
bits differ is reported and never chosen; exit 1 if the pinned launch (DECODE_ROW_LAUNCH)
differs. The state pool read is the roofline: batch x H x P x N fp32 per layer.
"""
import argparse
import sys
import time
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import kernels.ops.ssm_scan.decode_triton as row_kernel  # noqa: E402
import kernels.ops.ssm_scan.triton as kernel  # noqa: E402
from benchmarks.raw_output import provenance, write_raw  # noqa: E402
from kernels.models.config import load_model_config  # noqa: E402

DEVICE = "cuda"  # --device cpu (with TRITON_INTERPRET=1, a small config): a smoke test of this script
LAUNCHES = [{"p_block": pb, "unroll": u, "num_warps": w, "vector": v}
            for pb in (64, 32) for u in (1, 8) for w in (1, 2, 4) for v in (2, 4)]


def inputs(config, batch, generator):
    h, p, n, g, q = (config.mamba_num_heads, config.mamba_head_dim, config.ssm_state_size, config.n_groups,
                     config.chunk_size)
    slots = torch.randperm(batch + 3, generator=generator)[:batch]
    pools = [torch.randn(batch + 3, q, *shape, generator=generator)
             for shape in ((h, p), (g, n), (g, n))] + [torch.rand(batch + 3, q, h, generator=generator) * 0.1]
    state = torch.randn(batch + 3, h, p, n, generator=generator)
    buffered = torch.randint(0, q, (batch,), generator=generator)
    buffered[0], buffered[-1] = 0, q - 1
    a = -torch.rand(h, generator=generator) - 0.5
    d = torch.randn(h, generator=generator)
    return ([t.to(DEVICE) for t in pools], state.to(DEVICE), slots.to(DEVICE), buffered.to(DEVICE), a.to(DEVICE),
            d.to(DEVICE))


def bench(fn) -> list:
    """Milliseconds per call: do_bench's samples on CUDA, one timed call in the smoke test."""
    if DEVICE == "cuda":
        return do_bench(fn, return_mode="all")
    started = time.perf_counter()
    fn()
    return [1e3 * (time.perf_counter() - started)]


def prepared(config, pools, slots, buffered, a):
    q = config.chunk_size
    meta = torch.stack((slots * q, buffered + 1, buffered, slots, torch.arange(slots.shape[0], device=DEVICE)), 1)
    rows = [pool.view(-1, *pool.shape[2:]) for pool in pools]
    cs = kernel._cumsums(rows, a, meta, chunk_size=q, num_rows=q, num_sequences=slots.shape[0])
    return rows, meta, cs


def median(samples):
    return sorted(samples)[len(samples) // 2]


def summarize(result) -> None:
    print(f"batch {result['batch']}: block kernel {median(result['block_kernel_ms']):.3f} ms; "
          f"state read roofline {result['state_read_roofline_us']:.0f} us; "
          f"whole decode {median(result['decode_batch_ms']):.3f} ms")
    for r in sorted((r for r in result["launches"] if "median_ms" in r), key=lambda r: r["median_ms"])[:8]:
        print(f"  p_block {r['p_block']:>2} unroll {r['unroll']:>2} warps {r['num_warps']} vector {r['vector']} "
              f"{r['median_ms'] * 1e3:8.1f} us  differing {r['differing']}{'  (pinned)' if r.get('pinned') else ''}")
    for r in result["launches"]:
        if "error" in r or r.get("differing"):
            print("  ", {k: v for k, v in r.items() if k != "samples_ms"})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--batches", default="64,128")
    parser.add_argument("--config", default="nemotron-wide-cut")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--launches", type=int, default=len(LAUNCHES), help="the first n launches only")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    config = load_model_config(args.config)
    generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    block = kernel._require([torch.empty(1, 1, config.mamba_head_dim), torch.empty(1, 1, config.ssm_state_size)],
                            config.chunk_size)
    results, pinned_ok = [], True
    for batch in (int(b) for b in args.batches.split(",")):
        pools, state, slots, buffered, a, d = inputs(config, batch, generator)
        rows, meta, cs = prepared(config, pools, slots, buffered, a)
        shape = (batch, config.mamba_num_heads, config.mamba_head_dim)
        reference = torch.empty(shape, device=DEVICE)
        kernel._outputs(rows, cs, state[:, None], d, reference, meta, chunk_size=config.chunk_size,
                        num_sequences=batch, num_blocks=1)
        state_bytes = batch * config.mamba_num_heads * config.mamba_head_dim * config.ssm_state_size * 4
        roofline_us = state_bytes / 4.2e12 * 1e6
        block_ms = bench(lambda: kernel._outputs(rows, cs, state[:, None], d, reference.clone(), meta,
                                                    chunk_size=config.chunk_size, num_sequences=batch,
                                                    num_blocks=1))
        rows_out = []
        for launch in LAUNCHES[:args.launches] + [dict(row_kernel.DECODE_ROW_LAUNCH, pinned=True)]:
            y = torch.full(shape, float("nan"), device=DEVICE)
            run = dict(launch)
            run.pop("pinned", None)
            try:
                row_kernel.decode_rows(rows, cs, state, d, y, meta, block=block, launch=run)
                if DEVICE == "cuda":
                    torch.cuda.synchronize()
            except Exception as error:  # a launch the compiler refuses is information, not a failure
                rows_out.append({**launch, "error": repr(error)[:300]})
                continue
            differing = int((y.view(torch.int32) != reference.view(torch.int32)).sum())
            samples = bench(lambda: row_kernel.decode_rows(rows, cs, state, d, y, meta, block=block, launch=run))
            rows_out.append({**launch, "differing": differing, "median_ms": median(samples),
                             "samples_ms": samples})
            if launch.get("pinned") and differing:
                pinned_ok = False
        folded = state.clone()  # decode_batch folds the completed chunks' states in place
        whole = bench(lambda: kernel.decode_batch(pools, folded, slots, buffered, a, d, chunk_size=config.chunk_size))
        results.append({"batch": batch, "block_kernel_ms": block_ms, "launches": rows_out,
                        "decode_batch_ms": whole, "state_read_roofline_us": roofline_us})
    write_raw({"config": args.config, "results": results, **provenance()}, args.out, "gpu_ssm_decode")
    for result in results:
        summarize(result)
    return 0 if pinned_ok else 1


if __name__ == "__main__":
    sys.exit(main())
