"""The `harness` command. main(argv) returns the exit code, so tests call it directly.

  harness diff --model qwen3 [--size cut|full] [--contract consistent|fast|PATH] [--json]
"""
import argparse
import sys

from gates.workload import EngineShape, Workload

EXIT_OK, EXIT_BAD_INPUT, EXIT_DIFFERENT = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    diff = verbs.add_parser("diff", help="engine vs trainer per-token log-prob mismatch")
    diff.add_argument("--model", required=True, help="model family, e.g. qwen3")
    diff.add_argument("--size", default="cut", help="cut (CPU gates) or full")
    diff.add_argument("--contract", default="consistent", help="fast, consistent, or a YAML path")
    diff.add_argument("--num-sequences", type=int, default=64)
    diff.add_argument("--new-tokens", type=int, default=64)
    diff.add_argument("--seed", type=int, default=0)
    diff.add_argument("--tokens-per-step", type=int, default=48, help="engine token budget")
    diff.add_argument("--micro-batch", type=int, default=8, help="trainer micro-batch size")
    diff.add_argument("--json", action="store_true", help="print one JSON object")
    diff.add_argument("--strict", action="store_true", help="exit 2 when any token differs")
    return parser


def _diff(args) -> int:
    from harness.stages.diff import print_result, run_diff

    workload = Workload(num_sequences=args.num_sequences, new_tokens=args.new_tokens, seed=args.seed)
    result = run_diff(args.model, args.size, args.contract, workload,
                      EngineShape(tokens_per_step=args.tokens_per_step), args.micro_batch)
    print_result(result, args.json)
    return EXIT_DIFFERENT if args.strict and result["frac_tokens_differing"] else EXIT_OK


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"diff": _diff}[args.verb](args)
    except ValueError as error:
        print(f"harness {args.verb}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
