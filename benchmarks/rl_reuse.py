"""What `harness rl --reuse-rollout-logprobs` saves: GRPO step time with pi_old recomputed by the
trainer's forward against the engine's log-probs reused (the forward on step 0 and a seeded
share of steps), consistent contract, the same seed, in interleaved pairs of short runs in one
process; every step's phase times saved raw with the commit and the environment, after every run
(a run cut short keeps the pairs before it). On CUDA `harness rl` runs its at-scale shape.

    python3 -m benchmarks.rl_reuse --out benchmarks/results/cpu/rl [--pairs 3] [--steps 10]
    python3 -m benchmarks.rl_reuse --out $OUT/reuse --device cuda --size full --pairs 2 --steps 8 \
        --rl-args "--prompts 8 --group-size 8 --new-tokens 32 --lr 3e-4"
"""
import argparse
import json
import shlex
import statistics
import tempfile
from pathlib import Path

from benchmarks.raw_output import provenance, write_raw
from harness.cli import main as harness


def one_run(mode: str, args) -> list:
    """The per-step phase times of one fresh run in `mode` (recompute or reuse)."""
    with tempfile.TemporaryDirectory() as folder:
        flags = ["--reuse-rollout-logprobs", "--verify-fraction", str(args.verify_fraction)] if mode == "reuse" else []
        code = harness(["rl", "--model", args.model, "--size", args.size, "--device", args.device,
                        "--contract", "consistent", "--steps", str(args.steps), "--seed", "0",
                        "--checkpoint-every", str(args.steps), *shlex.split(args.rl_args), *flags, "--out", folder])
        if code != 0:
            raise SystemExit(f"harness rl ({mode}) exited {code}")
        rows = [json.loads(line) for line in (Path(folder) / "consistent" / "steps.jsonl").read_text().splitlines()]
    return [row["seconds"] for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="qwen3")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--verify-fraction", type=float, default=0.25)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--size", default="cut", help="shipped size: cut; on a GPU full (qwen3), wide-cut (nemotron)")
    parser.add_argument("--rl-args", default="", help="more `harness rl` options, one string")
    args = parser.parse_args()
    samples = {"recompute": [], "reuse": []}
    raw = {**provenance(), "args": vars(args), "samples": samples}
    path = write_raw(raw, args.out, "rl-reuse")  # rewritten after every run: raw first
    for _ in range(args.pairs):
        for mode in samples:
            samples[mode].append(one_run(mode, args))
            path.write_text(json.dumps(raw, indent=1))
    per_step = {mode: [sum(step.values()) for run in runs for step in run[1:]] for mode, runs in samples.items()}
    medians = {mode: statistics.median(values) for mode, values in per_step.items()}
    summary = {"median_step_s": medians, "reuse_over_recompute": medians["reuse"] / medians["recompute"],
               "median_score_s": {mode: statistics.median(s["score"] for run in runs for s in run[1:])
                                  for mode, runs in samples.items()}}
    path.write_text(json.dumps({**raw, "summary": summary}, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
