"""One GRPO update at RL scale, consistent vs fast contract, side by side (issue 23).

    python3 benchmarks/gpu_train_step.py --out DIR [--models qwen3-1.7b,nemotron-wide-cut]
        [--sequences 128] [--prompt-len 150] [--new-tokens 512] [--micro-batch 8]
        [--head-chunk-rows 1024] [--gradient-leaves 4] [--recompute] [--optimizer-on-host] [--pairs 2]
        [--contracts fast,consistent] [--profile] [--device cuda|cpu]

Per model: synthetic answers (random prompt and completion tokens, the rollout's log-probs
replaced by the trainer's own scores, rewards alternating in groups of 8), one Trainer per
contract on the same seeded weights, a warm-up step each, then `pairs` timed steps
alternating the contracts. Printed per contract: median step seconds, tokens per second,
the peak device memory of a step (torch.cuda.max_memory_allocated, reset before it) and the
model FLOP utilisation: 6 x parameters x tokens (forward + backward) over the step time and
the device's dense bf16 peak (--peak-tflops, the H200's 989 by default). Then consistent /
fast. Raw samples, the commit and the environment are written before the table; a model
that runs out of device memory is recorded as such and the next one runs.
--device cpu runs the cut configs at a small shape as a smoke test (no memory or MFU figures).
Issue 23's shape (128 x 662 tokens) on one GPU: one contract per process (two trainers do
not fit beside each other), e.g. `--models qwen3-1.7b --contracts consistent --micro-batch 8
--head-chunk-rows 1024 --head-fold-rows 256 --gradient-leaves 2 --pairs 1`, then `fast`;
add `--recompute` where the activations do not fit, `--optimizer-on-host` where the fp32
masters and Adam moments do not (nemotron-wide-cut: 41 GB of them); both keep the bits.
"""
import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.profiled import profiled  # noqa: E402
from benchmarks.raw_output import provenance, write_raw  # noqa: E402
from gates.workload import seeded_weights  # noqa: E402
from kernels.contract import load_contract  # noqa: E402
from kernels.models.config import load_model_config  # noqa: E402
from kernels.trainer.grpo import group_advantages  # noqa: E402
from kernels.trainer.logprobs import ScoredSequence  # noqa: E402
from kernels.trainer.trainer import GRADIENT_LEAVES, Trainer  # noqa: E402

CONTRACTS = ("fast", "consistent")
CPU_MODELS = "qwen3-cut,nemotron-cut"
GROUP = 8  # answers per prompt, as GRPO groups them


def answers(config, args, seed: int) -> list:
    rng = random.Random(seed)
    return [ScoredSequence(tuple(rng.randrange(1, config.vocab_size) for _ in range(args.prompt_len)),
                           tuple(rng.randrange(1, config.vocab_size) for _ in range(args.new_tokens)))
            for _ in range(args.sequences)]


def timed_step(trainer, sequences, advantages, old, device: str) -> dict:
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync()
    started = time.perf_counter()
    trainer.train_step(sequences, advantages, old)
    sync()
    seconds = time.perf_counter() - started
    return {"s": seconds, "peak_bytes": torch.cuda.max_memory_allocated() if device == "cuda" else None}


def run_model(name: str, args) -> dict:
    config = load_model_config(name)
    weights = seeded_weights(config)
    sequences = answers(config, args, args.seed)
    rewards = [float(i % 2) for i in range(len(sequences))]
    advantages = group_advantages(rewards, GROUP if len(sequences) % GROUP == 0 else 1)
    options = dict(device=args.device, micro_batch_size=args.micro_batch, head_chunk_rows=args.head_chunk_rows,
                   head_fold_rows=args.head_fold_rows, gradient_leaves=args.gradient_leaves,
                   recompute_layers=args.recompute, optimizer_on_host=args.optimizer_on_host)
    contracts = args.contracts.split(",")
    trainers = {c: Trainer(config, load_contract(c), weights=weights, **options) for c in contracts}
    old = trainers["consistent" if "consistent" in trainers else contracts[0]].score(sequences)
    samples = {c: [] for c in contracts}
    for contract in contracts:  # warm-up: allocator, kernel compiles
        timed_step(trainers[contract], sequences, advantages, old, args.device)
    for _ in range(args.pairs):
        for contract in contracts:
            samples[contract].append(timed_step(trainers[contract], sequences, advantages, old, args.device))
    profiles = {}
    if args.profile:  # one more step each, under the profiler: where the step's time goes
        sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
        for contract in contracts:
            profiles[contract] = profiled(lambda: trainers[contract].train_step(sequences, advantages, old),
                                          sync, limit=25)
    parameters = sum(p.numel() for p in trainers[contracts[0]].model.parameters())
    tokens = args.sequences * (args.prompt_len + args.new_tokens)
    return {"config": name, "parameters": parameters, "tokens": tokens, "samples": samples, "profiles": profiles}


def summarize(entry: dict, peak_tflops: float) -> dict:
    rows = {}
    for contract, samples in entry["samples"].items():
        seconds = statistics.median(s["s"] for s in samples)
        peaks = [s["peak_bytes"] for s in samples if s["peak_bytes"] is not None]
        flops = 6 * entry["parameters"] * entry["tokens"]
        rows[contract] = {"step_s": seconds, "tokens_per_s": entry["tokens"] / seconds,
                          "peak_gb": max(peaks) / 1e9 if peaks else None,
                          "mfu": flops / seconds / (peak_tflops * 1e12)}
    if set(CONTRACTS) <= set(rows):
        rows["ratio"] = rows["consistent"]["step_s"] / rows["fast"]["step_s"]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default=None, help="default qwen3-1.7b,nemotron-wide-cut (cuda) or the cuts (cpu)")
    parser.add_argument("--sequences", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, default=150)
    parser.add_argument("--new-tokens", type=int, default=512)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--head-chunk-rows", type=int, default=1024)
    parser.add_argument("--head-fold-rows", type=int, default=256)
    parser.add_argument("--gradient-leaves", type=int, default=GRADIENT_LEAVES,
                        help="the update's fixed gradient leaves (fp32 gradient memory: 1 + log2 of it)")
    parser.add_argument("--recompute", action="store_true", help="per-layer activation recompute (same bits)")
    parser.add_argument("--optimizer-on-host", action="store_true",
                        help="fp32 masters and Adam moments in pinned host memory (same bits, 12 B a parameter)")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--profile", action="store_true",
                        help="one more step per contract under torch's profiler: its top kernels and host ops")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of the device")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--contracts", default=",".join(CONTRACTS),
                        help="one contract alone gives its trainer's own peak (two trainers share the device)")
    args = parser.parse_args()
    if not args.contracts or not set(args.contracts.split(",")) <= set(CONTRACTS):
        parser.error(f"--contracts: a comma list of {', '.join(CONTRACTS)}, got {args.contracts!r}")
    if args.head_chunk_rows % args.head_fold_rows:
        parser.error(f"--head-chunk-rows must be a multiple of --head-fold-rows ({args.head_fold_rows})")
    models = args.models or ("qwen3-1.7b,nemotron-wide-cut" if args.device == "cuda" else CPU_MODELS)
    record = {**provenance(), "args": vars(args), "models": {}}
    for name in models.split(","):
        print(time.strftime("%H:%M:%S"), f"{name}: {args.sequences} x {args.prompt_len + args.new_tokens} tokens",
              flush=True)
        try:
            record["models"][name] = run_model(name, args)
        except torch.OutOfMemoryError as error:  # a figure too: say so, keep the other models
            record["models"][name] = {"out_of_memory": str(error).splitlines()[0]}
            print(f"{name}: out of memory: {record['models'][name]['out_of_memory']}", flush=True)
        write_raw(record, args.out, "gpu_train_step")  # raw samples before any summary
    print(f"{'model':<20}{'contract':<12}{'step s':>8}{'tok/s':>10}{'peak GB':>9}{'MFU':>7}")
    for name, entry in record["models"].items():
        if "out_of_memory" in entry:
            print(f"{name:<20}out of memory")
            continue
        rows = summarize(entry, args.peak_tflops)
        for contract in entry["samples"]:
            row = rows[contract]
            peak = f"{row['peak_gb']:>9.1f}" if row["peak_gb"] is not None else f"{'-':>9}"
            print(f"{name:<20}{contract:<12}{row['step_s']:>8.2f}{row['tokens_per_s']:>10.0f}{peak}{row['mfu']:>7.1%}")
        if "ratio" in rows:
            print(f"{name:<20}{'cons/fast':<12}{rows['ratio']:>8.2f}")
        for contract, profile in entry.get("profiles", {}).items():
            print(f"{name} {contract}, one profiled step: {profile['wall_ms']:.0f} ms wall, "
                  f"{profile['gpu_kernel_ms']:.0f} ms of kernels")
            for row in profile["kernels_us"] or profile["host_self_us"]:
                print(f"  {row.get('kernel', row.get('op')):<80}{row['us'] / 1e3:>10.1f} ms{row['calls']:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
