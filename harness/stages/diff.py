"""`harness diff`: the target's engine generates, its trainer scores the same tokens, and the
per-token mismatch figures are reported (gates/mismatch.py). Our target runs a shipped config
with seeded weights (`--model`, `--size`) or a transformers checkpoint directory (`--checkpoint
DIR`: family from its model_type, its own weights); `--target transformers` runs the checkpoint
in transformers (generate vs forward)."""
import json

from gates.mismatch import mismatch_stats, per_token_abs_dp
from gates.workload import EngineShape, Workload
from harness.exit_codes import EXIT_DIFFERENT, EXIT_OK
from harness.stages.checkpoint_option import add_model_options
from harness.stages.target_option import add_target_option, build_target, model_for_target

FIGURES = ("max_abs_dp", "mean_abs_dp", "std_abs_dp", "k3_kl", "frac_tokens_differing", "num_tokens")


def run_diff(model: str, size: str, contract_name: str, workload: Workload,
             shape: EngineShape = EngineShape(), micro_batch_size: int = 8, per_token: bool = False,
             checkpoint=None, target: str = "ours") -> dict:
    """The mismatch figures; with per_token, also `abs_dp`, every token's |dp| (for plots).
    With `checkpoint` (a directory), its config and weights instead of model / size."""
    judged, size = build_target(target, model, size, contract_name, checkpoint, shape, micro_batch_size)
    samples = judged.generate(workload)
    trainer_logprobs = judged.score(samples)
    engine_logprobs = [s.logprobs for s in samples]
    contract = judged.contract.name if "contract" in judged.offers else "n/a"
    result = {"target": judged.name, "model": model, "size": size, "contract": contract, "seed": workload.seed,
              **mismatch_stats(engine_logprobs, trainer_logprobs)}
    if per_token:
        result["abs_dp"] = per_token_abs_dp(engine_logprobs, trainer_logprobs)
    return result


def format_table(result: dict) -> str:
    lines = [f"rollout vs trainer: target {result.get('target', 'ours')}, model {result['model']} "
             f"({result['size']}), contract {result['contract']}, seed {result['seed']}",
             f"{'figure':<24}{'value':>16}"]
    for name in FIGURES:
        value = result[name]
        text = str(value) if isinstance(value, int) else f"{value:.6g}"
        lines.append(f"{name:<24}{text:>16}")
    verdict = "bitwise identical" if result["frac_tokens_differing"] == 0 else "DIFFERENT"
    lines.append(f"verdict: {verdict}")
    return "\n".join(lines)


def print_result(result: dict, as_json: bool) -> None:
    print(json.dumps(result, sort_keys=True) if as_json else format_table(result))


def add_arguments(parser) -> None:
    add_model_options(parser, None)
    add_target_option(parser)
    parser.add_argument("--size", default="cut", help="cut (CPU gates) or full")
    parser.add_argument("--contract", default="consistent", help="fast, consistent, or a YAML path")
    parser.add_argument("--num-sequences", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokens-per-step", type=int, default=48, help="engine token budget")
    parser.add_argument("--micro-batch", type=int, default=8, help="trainer micro-batch size")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--strict", action="store_true", help="exit 2 when any token differs")


def run(args) -> int:
    workload = Workload(num_sequences=args.num_sequences, new_tokens=args.new_tokens, seed=args.seed)
    result = run_diff(model_for_target(args), args.size, args.contract, workload,
                      EngineShape(tokens_per_step=args.tokens_per_step), args.micro_batch,
                      checkpoint=args.checkpoint, target=args.target)
    print_result(result, args.json)
    return EXIT_DIFFERENT if args.strict and result["frac_tokens_differing"] else EXIT_OK
