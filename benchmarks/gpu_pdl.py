"""Programmatic dependent launch on or off, per contract, side by side: decode step time and bits.

    python3 benchmarks/gpu_pdl.py --out DIR [--models qwen3-1.7b] [--batch 128] [--prompt-len 150]
        [--new-tokens 512] [--pairs 2] [--device cpu]

Four engines per model (fast and consistent, each with BITWISE_PDL off and on: kernels/ops/pdl.py),
warmed up under their own setting (the decode graphs capture it), then timed in interleaved
rounds (fast off, fast on, consistent off, consistent on, ...), every step timed on the host by
gates/rollout_clock.py as in gpu_rollout.py. Printed per variant: tokens/s and the median decode
step (ms), and per contract the on / off ratios; checked: PDL moves no bit (each contract's
tokens and log-prob bits with PDL equal those without, every pair). Raw samples, the commit and
the environment go to DIR/gpu_pdl.json, written after every round. `--device cpu` runs the
script's logic on the cut (PDL is off there: the variants are the same kernels).
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import gpu_rollout  # noqa: E402
from benchmarks.raw_output import provenance  # noqa: E402
from gates.compare import int32_bits  # noqa: E402
from kernels.contract import load_contract  # noqa: E402
from kernels.models.config import load_model_config  # noqa: E402
from kernels.models.registry import build_model  # noqa: E402

VARIANTS = [(contract, pdl) for contract in ("fast", "consistent") for pdl in ("off", "on")]


@contextlib.contextmanager
def pdl_setting(pdl: str):
    """BITWISE_PDL as the variant asks, restored after (launches read it; graphs keep it)."""
    before = os.environ.get("BITWISE_PDL")
    os.environ["BITWISE_PDL"] = "1" if pdl == "on" else "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("BITWISE_PDL", None)
        else:
            os.environ["BITWISE_PDL"] = before


def _bits(completions) -> list:
    return [(c.tokens, int32_bits(c.logprob_tensor)) for c in completions]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="qwen3-1.7b")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, default=150)
    parser.add_argument("--new-tokens", type=int, default=512)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    gpu_rollout.DEVICE = args.device
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {**provenance(), "args": vars(args), "models": []}
    path = out / "gpu_pdl.json"
    for model_name in args.models.split(","):
        config = load_model_config(model_name)
        weights = {k: v.detach() for k, v in build_model(config, 0).state_dict().items()}
        engines, entry = {}, {"model": model_name, "samples": {f"{c}/{p}": [] for c, p in VARIANTS}, "bits_equal": []}
        for contract, pdl in VARIANTS:
            with pdl_setting(pdl):
                engines[contract, pdl] = gpu_rollout.make_engine(config, load_contract(contract), weights, args.batch,
                                                                 args.prompt_len, args.new_tokens)
                gpu_rollout.rollout(engines[contract, pdl], config, args.batch, args.prompt_len, args.new_tokens,
                                    seed=1)
        record["models"].append(entry)
        for pair in range(args.pairs):
            kept = {}
            for contract, pdl in VARIANTS:
                with pdl_setting(pdl):
                    completions, steps, total = gpu_rollout.rollout(engines[contract, pdl], config, args.batch,
                                                                    args.prompt_len, args.new_tokens, seed=100 + pair)
                kept[contract, pdl] = _bits(completions)
                entry["samples"][f"{contract}/{pdl}"].append(
                    gpu_rollout.rollout_sample(args.batch, args.new_tokens, steps, total))
            entry["bits_equal"].append({c: kept[c, "off"] == kept[c, "on"] for c in ("fast", "consistent")})
            path.write_text(json.dumps(record, indent=1))  # raw data first, after every round
        print(f"{model_name}, batch {args.batch}, {args.prompt_len} + {args.new_tokens} tokens, {args.pairs} pairs:")
        medians = {}
        for variant, samples in entry["samples"].items():
            steps = [s for sample in samples for s in sample["decode_step_s"]]
            medians[variant] = statistics.median(steps) if steps else float("nan")
            print(f"  {variant:<16} {statistics.median(s['tokens_per_s'] for s in samples):>10.0f} tok/s  "
                  f"decode step {medians[variant] * 1e3:.3f} ms")
        for contract in ("fast", "consistent"):
            print(f"  {contract}: decode step on / off {medians[contract + '/on'] / medians[contract + '/off']:.3f}; "
                  f"bits equal with PDL in every pair: {all(b[contract] for b in entry['bits_equal'])}")
        entry["decode_step_median_s"] = medians
        path.write_text(json.dumps(record, indent=1))
        engines.clear()
    print(f"wrote {path}")
    return 0 if all(all(b.values()) for entry in record["models"] for b in entry["bits_equal"]) else 1


if __name__ == "__main__":
    sys.exit(main())
