"""Rollout throughput and trainer step time on CUDA, consistent vs fast contract, side by side.

    python3 benchmarks/gpu_rollout.py --out DIR [--models qwen3-1.7b,nemotron-wide-cut]
        [--batches 1,16,64] [--new-tokens 24] [--prompt-len 64] [--pairs 2] [--budget-s 420]
        [--skip trainer,profile,reference]

Per (model, batch): the engine generates `batch` requests (all arriving at step 0, sampled at
temperature 1) with the fast and the consistent contract alternately (A B A B ..., after one
warm-up each, which compiles the Triton kernels and captures the decode CUDA graphs where the
model allows them, in both contracts); every engine step is timed on the host, unsynced
(with look-ahead the host runs one step ahead of the GPU, so in steady decode a step's
interval is the GPU's pace; a sync per step would serialise them), and labelled by its
phases, so decode step times come out beside tokens/s; the run's total is synced. The trainer's
fwd+bwd+update step on the same completions is timed the same way. Then: the decode step at
the largest batch against the memory roofline (the weights, KV and SSM state the step reads, over the
copy bandwidth measured here; each step against the roofline at its own context, the
median of those ratios printed), `transformers`' generate on the same Qwen3 config as an
outside reference, and the top CUDA kernels of one decode step per contract (torch.profiler).
Raw samples, the commit and the environment go to DIR/gpu_rollout.json; a table is printed
(the roofline arithmetic, the cells' summaries and the printing: benchmarks/rollout_summary.py).
Weights are seeded random (speed does not depend on them); both contracts get the same ones.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.profiled import profiled  # noqa: E402
from benchmarks.raw_output import provenance  # noqa: E402
from benchmarks.rollout_summary import TABLE_HEADER, cell_line, print_kernels, summarize_cell  # noqa: E402
from gates.rollout_clock import timed_rollout  # noqa: E402
from kernels.contract import load_contract  # noqa: E402
from kernels.engine.engine import Engine  # noqa: E402
from kernels.engine.graphs import graphs_unsupported  # noqa: E402
from kernels.engine.request import Request  # noqa: E402
from kernels.models.config import load_model_config  # noqa: E402
from kernels.models.registry import build_model  # noqa: E402
from kernels.ops.sampler import SamplingParams  # noqa: E402
from kernels.trainer.grpo import group_advantages  # noqa: E402
from kernels.trainer.logprobs import scored_sequences  # noqa: E402
from kernels.trainer.trainer import Trainer  # noqa: E402

CONTRACTS = ("fast", "consistent")
DEVICE = "cuda"  # --device cpu runs the same script on small configs as a smoke test


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _requests(config, batch, prompt_len, new_tokens, seed):
    gen = torch.Generator().manual_seed(seed)
    return [Request(i, tuple(int(t) for t in torch.randint(1, config.vocab_size, (prompt_len,), generator=gen)),
                    new_tokens, SamplingParams(1.0, seed=seed * 1000 + i)) for i in range(batch)]


def make_engine(config, contract, weights, batch, prompt_len, new_tokens):
    """An engine for `batch` sequences; decode replays CUDA graphs where the model allows
    (kernels/engine/graphs.py: one process), in both contracts alike."""
    graphs = DEVICE == "cuda" and graphs_unsupported(config, None) is None
    return Engine(config, contract, weights, device=DEVICE, max_running=batch,
                  max_tokens_per_step=max(batch * prompt_len, 512),
                  num_blocks=batch * -(-(prompt_len + new_tokens) // 16), cuda_graphs=graphs)


def rollout(engine, config, batch, prompt_len, new_tokens, seed):
    """(completions, [(phases, seconds)] per engine step, total seconds) on a warmed engine
    (its graphs captured by an earlier rollout: capture is a one-off, not a step's cost),
    timed by the judge's clock (gates/rollout_clock.py)."""
    requests = _requests(config, batch, prompt_len, new_tokens, seed)
    completions, wall_s, _, steps = timed_rollout(engine, requests, sync, per_step=True)
    return completions, steps, wall_s


def rollout_sample(batch, new_tokens, steps, total) -> dict:
    """One timed rollout's raw sample: tokens/s, its seconds, decode steps apart from the rest."""
    return {"tokens_per_s": batch * new_tokens / total, "total_s": total,
            "decode_step_s": [s for phase, s in steps if phase == "decode"],
            "other_steps": [[phase, s] for phase, s in steps if phase != "decode"]}


def timed_train_step(config, contract, weights, completions):
    trainer = Trainer(config, contract, weights=weights, device=DEVICE, micro_batch_size=16)
    sequences = scored_sequences(completions)
    rewards = [float(i % 2) for i in range(len(sequences))]
    group = 2 if len(sequences) % 2 == 0 else 1
    advantages = group_advantages(rewards, group)
    old = [c.logprob_tensor for c in completions]
    trainer.train_step(sequences, advantages, old)  # warm-up: allocator, cuBLAS handles, kernel compiles
    sync()
    started = time.perf_counter()
    trainer.train_step(sequences, advantages, old)
    sync()
    return time.perf_counter() - started


def copy_bandwidth(device: str | None = None) -> float:
    """Device memory bandwidth in bytes/s from a 2 GiB device-to-device copy (read + write),
    on `device` (default: the script's)."""
    device = device or DEVICE
    wait = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    src = torch.empty(2**30 if device == "cuda" else 2**24, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    wait()
    samples = []
    for _ in range(10):
        started = time.perf_counter()
        dst.copy_(src)
        wait()
        samples.append(time.perf_counter() - started)
    return 2 * src.numel() * src.element_size() / statistics.median(samples)


def transformers_generate(config, batch, prompt_len, new_tokens, repeats=1):
    """tokens/s of HF generate on the same Qwen3 shape (random weights, sampling)."""
    import transformers
    hf_config = transformers.Qwen3Config(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers, num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads, head_dim=config.head_dim, rope_theta=config.rope_theta,
        rms_norm_eps=config.rms_norm_eps, tie_word_embeddings=config.tie_word_embeddings,
        max_position_embeddings=config.max_position, torch_dtype="bfloat16")
    model = transformers.Qwen3ForCausalLM(hf_config).to(DEVICE, torch.bfloat16).eval()
    ids = torch.randint(1, config.vocab_size, (batch, prompt_len), device=DEVICE)
    samples = []
    for new in [8] + [new_tokens] * repeats:  # a short first call warms up
        sync()
        started = time.perf_counter()
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                       min_new_tokens=new, do_sample=True, pad_token_id=0)
        sync()
        samples.append(batch * new / (time.perf_counter() - started))
    del model
    return samples[1:]


def top_kernels(config, contract, weights, batch, prompt_len, limit=12):
    """The CUDA kernels of one eager decode step (after prefill), by total time."""
    engine = Engine(config, contract, weights, device=DEVICE, max_running=batch,
                    max_tokens_per_step=max(batch * prompt_len, 512),
                    num_blocks=batch * -(-(prompt_len + 4) // 16))
    for request in _requests(config, batch, prompt_len, 4, seed=7):
        engine.add_request(request)
    engine.step()  # prefill (and the first sample)
    sync()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        engine.step()
        sync()
    rows = sorted(((e.key, e.device_time_total, e.count) for e in prof.key_averages() if e.device_time_total > 0),
                  key=lambda r: -r[1])
    return [{"kernel": k[:90], "us": round(t, 1), "calls": n} for k, t, n in rows[:limit]]


def _profiled_steps(engine, limit, steps=1):
    """`steps` consecutive engine steps under the profiler; times and counts per step (one
    step alone would hide the overlap of a step launched ahead with its predecessor)."""
    return profiled(engine.step, sync, limit, steps)


def step_profile(config, contract, weights, batch, prompt_len, limit=10, decode_steps=8):
    """The prefill step and `decode_steps` decode steps of a warmed engine (graphs where the
    model allows) under the profiler: wall time, GPU time of their kernels, the host ops that
    took longest, per step."""
    engine = make_engine(config, contract, weights, batch, prompt_len, decode_steps + 4)
    rollout(engine, config, batch, prompt_len, decode_steps + 4, seed=3)  # captures, compiles
    for request in _requests(config, batch, prompt_len, decode_steps + 4, seed=9):
        engine.add_request(request)
    prefill = _profiled_steps(engine, limit)
    engine.step()
    sync()
    decode = _profiled_steps(engine, limit, decode_steps)
    return dict(decode, graphs=engine.replays_cuda_graphs, launched_ahead=engine.steps_launched_ahead,
                prefill=prefill)


SKIPPABLE = ("trainer", "profile", "reference")  # the trainer step, the profiled steps, transformers generate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="qwen3-1.7b,nemotron-wide-cut")
    parser.add_argument("--batches", default="1,16,64")
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop starting new cells after this")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a smoke test")
    parser.add_argument("--skip", default="", help="comma-separated parts not to run, for a short device call: "
                        f"{', '.join(SKIPPABLE)}")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if skip - set(SKIPPABLE):
        parser.error(f"--skip: unknown parts {sorted(skip - set(SKIPPABLE))}; choose from {SKIPPABLE}")
    times_trainer = "trainer" not in skip
    global DEVICE
    DEVICE = args.device
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    record = {**provenance(), "args": vars(args), "cells": [],
              "bandwidth_bytes_per_s": copy_bandwidth(), "references": [], "kernels": []}
    contracts = {name: load_contract(name) for name in CONTRACTS}
    path = out / "gpu_rollout.json"
    print(f"copy bandwidth {record['bandwidth_bytes_per_s'] / 1e12:.2f} TB/s")
    print(TABLE_HEADER)
    for model_name in args.models.split(","):
        config = load_model_config(model_name)
        weights = {k: v.detach() for k, v in build_model(config, 0).state_dict().items()}
        batches = [int(b) for b in args.batches.split(",")]
        for batch in batches:
            if time.perf_counter() - started > args.budget_s:
                print(f"budget reached: skipping {model_name} batch {batch}")
                continue
            cell = {"model": model_name, "batch": batch, "samples": {c: [] for c in CONTRACTS}}
            engines = {name: make_engine(config, contracts[name], weights, batch, args.prompt_len, args.new_tokens)
                       for name in CONTRACTS}
            cell["cuda_graphs"] = engines["fast"].replays_cuda_graphs
            for name in CONTRACTS:  # warm-up, the timed shape: compiles Triton kernels, captures graphs
                rollout(engines[name], config, batch, args.prompt_len, args.new_tokens, seed=1)
            for pair in range(args.pairs):
                for name in CONTRACTS:
                    completions, steps, total = rollout(engines[name], config, batch,
                                                        args.prompt_len, args.new_tokens, seed=100 + pair)
                    train_s = timed_train_step(config, contracts[name], weights, completions) if times_trainer else None
                    cell["samples"][name].append({**rollout_sample(batch, args.new_tokens, steps, total),
                                                  "train_step_s": train_s})
            cell["summary"] = summarize_cell(cell, config, weights, args.prompt_len, args.new_tokens,
                                             record["bandwidth_bytes_per_s"], times_trainer)
            record["cells"].append(cell)
            del engines
            path.write_text(json.dumps(record, indent=1))  # raw data first, after every cell
            print(cell_line(model_name, cell, times_trainer), flush=True)
        if DEVICE == "cuda" and "profile" not in skip and time.perf_counter() - started < args.budget_s:
            for name in CONTRACTS:
                record["kernels"].append({"model": model_name, "contract": name, "batch": max(batches),
                                          "top": top_kernels(config, contracts[name], weights, max(batches),
                                                             args.prompt_len),
                                          "step": step_profile(config, contracts[name], weights, max(batches),
                                                               args.prompt_len)})
            path.write_text(json.dumps(record, indent=1))
        if config.family == "qwen3" and "reference" not in skip and time.perf_counter() - started < args.budget_s:
            batch = max(int(b) for b in args.batches.split(","))
            samples = transformers_generate(config, batch, args.prompt_len, args.new_tokens)
            record["references"].append({"model": model_name, "batch": batch, "what": "transformers generate",
                                         "tokens_per_s": samples})
            path.write_text(json.dumps(record, indent=1))
            print(f"{model_name:<18}{batch:>6} transformers generate: {statistics.median(samples):.1f} tok/s")
        del weights
    print_kernels(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
