"""`harness rl --model M [--contract fast|consistent|both] [--steps N] [--out DIR]`: a GRPO run you
can watch. One update per step on a learnable, exactly scored task (the share of even token ids
in a completion: kernels/trainer/rl_loop.py), per contract: the reward, the engine-vs-trainer
mismatch (max / mean / std |dp|, k3 KL), the spread of the update's importance ratios and its
clipped fraction, each phase's time. Each step's record is appended to OUT/<contract>/steps.jsonl
before the checkpoint is saved (every `--checkpoint-every` steps and at the last: a full-width
model's weights, master copy and AdamW moments are ~24 GB), so `--out` resumes at the last
checkpoint and replays the steps after it, which give the same records (a seeded run).
`--reuse-rollout-logprobs`: pi_old is the engine's log-probs and the trainer's forward runs only
on step 0 and a seeded fraction of steps, where the bits must equal the engine's (else the run
stops with an error): the forward that bitwise consistency makes unnecessary.
"""
import dataclasses
import json
import os
import random
from pathlib import Path

import torch

from gates.compare import int32_bits
from gates.mismatch import mismatch_stats
from harness.exit_codes import EXIT_OK
from harness.stages import rl_report
from harness.stages.gates import check_device
from kernels.contract import load_contract
from kernels.engine.graphs import graphs_unsupported
from kernels.models.config import load_model_config
from kernels.models.registry import config_name
from kernels.ops.sampler.forms import mix_seed
from kernels.trainer.rl_loop import GRPORun, GRPOSettings

CLIP_EPS = 0.2  # kernels/trainer/grpo.py's policy_loss default


def settings_of(args, config) -> GRPOSettings:
    """The CPU's shape: few rows a step, so prefill is chunked and steps mix; on CUDA, at_scale."""
    settings = GRPOSettings(prompts_per_step=args.prompts, group_size=args.group_size, max_new_tokens=args.new_tokens,
                            lr=args.lr, seed=args.seed)
    return at_scale(settings, graphs_unsupported(config, None) is None) if args.device == "cuda" else settings


MICRO_BATCH_TOKENS = 16384  # at most a trainer micro-batch's tokens at scale


def at_scale(settings: GRPOSettings, graphs: bool) -> GRPOSettings:
    """The shape of a rollout at scale: every sequence of a step running at once with its KV
    reserved, decode from CUDA graphs (`graphs`), the trainer's memory bounded by the
    micro-batch (head chunks, per-layer recompute), which is as large as MICRO_BATCH_TOKENS
    allows: each costs a Python launch of every kernel of a forward, a recompute and a backward,
    which dominates short sequences. Under the consistent contract the engine's shape, the head
    chunks and recompute move no bit; the micro-batch is the gradient's fold unit (a numerics
    choice of the run, kept in its settings as the rest)."""
    rows, longest = settings.prompts_per_step * settings.group_size, settings.max_prompt_len + settings.max_new_tokens
    return dataclasses.replace(settings, engine_tokens_per_step=max(2048, rows), engine_max_running=rows,
                               engine_kv_blocks=rows * -(-longest // 16), cuda_graphs=graphs,
                               micro_batch_size=max(1, MICRO_BATCH_TOKENS // longest), head_chunk_rows=1024,
                               recompute_layers=True)


def _spread(values: torch.Tensor) -> dict:
    return {"min": float(values.min()), "max": float(values.max()), "std": float(values.std(unbiased=False))}


def step_record(record, verified) -> dict:
    """One step as JSON: figures computed from the step's raw tensors."""
    update, old, engine = (torch.cat(t) for t in (record.update_logprobs, record.old_logprobs, record.engine_logprobs))
    ratio = torch.exp(update - old)
    row = {"step": record.step, "reward": sum(record.rewards) / len(record.rewards), "rewards": record.rewards,
           "loss": record.loss, "ratio": _spread(ratio),
           "clipped_fraction": float(((ratio - 1).abs() > CLIP_EPS).float().mean()),
           "seconds": record.seconds, "verified": verified, "mismatch": None}
    if record.trainer_logprobs is not None:
        row["mismatch"] = mismatch_stats(record.engine_logprobs, record.trainer_logprobs)
        row["behaviour_ratio"] = _spread(torch.exp(torch.cat(record.trainer_logprobs) - engine))
    return row


def _verify_step(seed: int, step: int, fraction: float) -> bool:
    return step == 0 or random.Random(mix_seed(seed, 2_000_000 + step)).random() < fraction


def _resume(folder: Path, config, contract, settings, device: str):
    """(run, records so far): from folder/checkpoint when one is there, records cut to its step."""
    steps, checkpoint, retired = folder / "steps.jsonl", folder / "checkpoint", folder / "checkpoint.old"
    if not checkpoint.exists() and retired.exists():
        os.replace(retired, checkpoint)  # a save cut off between its two renames left the last one here
    if not checkpoint.exists():
        steps.unlink(missing_ok=True)
        return GRPORun(config, contract, settings, device=device), []
    run = GRPORun.resume(checkpoint, config, contract, settings, device=device)
    records = [json.loads(line) for line in steps.read_text().splitlines()][:run.step_index]
    steps.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))  # a step cut off: again
    return run, records


def run_contract(folder: Path, config, contract, settings, args) -> list:
    """The run of one contract to args.steps steps: every step's record (the resumed ones too)."""
    folder.mkdir(parents=True, exist_ok=True)
    run, records = _resume(folder, config, contract, settings, args.device)
    reuse = args.reuse_rollout_logprobs
    while run.step_index < args.steps:
        verify = not reuse or _verify_step(settings.seed, run.step_index, args.verify_fraction)
        record = run.step(old="engine" if reuse else "trainer", score=verify)
        if reuse and verify and [int32_bits(t) for t in record.engine_logprobs] != [
                int32_bits(t) for t in record.trainer_logprobs]:
            raise ValueError(f"{contract.name}, step {record.step}: the trainer's log-probs differ from the engine's "
                             f"({mismatch_stats(record.engine_logprobs, record.trainer_logprobs)}): "
                             "--reuse-rollout-logprobs needs a contract whose C07 passes")
        row = step_record(record, verify if reuse else None)
        with (folder / "steps.jsonl").open("a") as out:  # raw first, then the resume point
            out.write(json.dumps(row, sort_keys=True) + "\n")
        if run.step_index % args.checkpoint_every == 0 or run.step_index == args.steps:
            run.save(folder / "checkpoint")
        records.append(row)
        mismatch = row["mismatch"]
        print(f"[{contract.name}] step {row['step'] + 1}/{args.steps} reward {row['reward']:.3f} "
              + (f"max|dp| {mismatch['max_abs_dp']:.3g} k3 {mismatch['k3_kl']:.3g} " if mismatch else "(not scored) ")
              + f"ratio [{row['ratio']['min']:.6g}, {row['ratio']['max']:.6g}] "
              + " ".join(f"{k} {v:.2f}s" for k, v in row["seconds"].items()), flush=True)
    return records


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="qwen3", help="model family: qwen3, nemotron, deepseek or qwen3_5")
    parser.add_argument("--size", default="cut", help="shipped size: cut; on a GPU full (qwen3), wide-cut (nemotron)")
    parser.add_argument("--contract", default="both", help="fast, consistent, or both")
    parser.add_argument("--steps", type=int, default=30, help="GRPO steps per contract")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--group-size", type=int, default=4, help="samples per prompt")
    parser.add_argument("--new-tokens", type=int, default=16, help="tokens per completion")
    parser.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--reuse-rollout-logprobs", action="store_true",
                        help="pi_old = the engine's log-probs; the trainer's forward only on verified steps")
    parser.add_argument("--verify-fraction", type=float, default=0.25,
                        help="with --reuse-rollout-logprobs: the share of steps whose bits are checked (step 0 always)")
    parser.add_argument("--checkpoint-every", type=int, default=1,
                        help="save the resume point every N steps (and after the last); a resume replays the rest")
    parser.add_argument("--out", default="runs/rl", help="run directory; an existing one is resumed")


def run(args) -> int:
    contracts = {"both": ["consistent", "fast"]}.get(args.contract, [args.contract])
    if args.steps < 1 or args.checkpoint_every < 1 or not 0 <= args.verify_fraction <= 1:
        raise ValueError("--steps and --checkpoint-every must be >= 1 and --verify-fraction within [0, 1]")
    if args.prompts < 1 or args.new_tokens < 1 or args.group_size < 2:
        raise ValueError(f"--prompts {args.prompts}, --new-tokens {args.new_tokens}, --group-size {args.group_size}: "
                         "prompts and new tokens must be >= 1 and the group >= 2 (GRPO's advantage compares "
                         "the answers of one prompt)")
    check_device(args.device)
    config = load_model_config(config_name(args.model, args.size))
    settings, out = settings_of(args, config), Path(args.out)
    asked = {"model": args.model, "size": args.size, "contracts": contracts, "device": args.device,
             "reuse_rollout_logprobs": args.reuse_rollout_logprobs, "verify_fraction": args.verify_fraction,
             "settings": dataclasses.asdict(settings)}
    recorded = out / "rl.json"
    if recorded.exists() and json.loads(recorded.read_text()) != asked:
        raise ValueError(f"{recorded}: this run was started with {json.loads(recorded.read_text())}; resume it with "
                         "the same options (--steps may grow) or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    recorded.write_text(json.dumps(asked, indent=2, sort_keys=True))
    for name in contracts:
        run_contract(out / name, config, load_contract(name), settings, args)
    for path in rl_report.render(out, contracts).values():
        print(path)
    return EXIT_OK
