"""The `harness` command. main(argv) returns the exit code, so tests call it directly.

  harness diff --model qwen3 [--size cut|full] [--contract consistent|fast|PATH] [--json]
  harness gates --model nemotron [--only C3,C7] [--contract consistent] [--device cpu] [--out DIR]
  harness gates --list
"""
import argparse
import sys
import time
from pathlib import Path

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
    gates = verbs.add_parser("gates", help="run the gates (C<NN>.json per gate in --out)")
    gates.add_argument("--model", default="nemotron", help="model family, e.g. nemotron or qwen3")
    gates.add_argument("--only", help="comma-separated gates, e.g. C3,C7")
    gates.add_argument("--contract", default="consistent", help="fast, consistent, or a YAML path")
    gates.add_argument("--device", default="cpu", help="cpu or cuda")
    gates.add_argument("--out", help="run directory (default runs/gates-<time>)")
    gates.add_argument("--list", action="store_true", help="print each gate's pass condition")
    return parser


def _gates(args) -> int:
    from gates.faults import register_all
    from harness.stages import gates
    from kernels.contract import load_contract

    register_all()  # so a contract naming a planted fault validates here as in the gate process
    from kernels.models.registry import config_name

    selected = gates.select(args.only)
    if args.list:
        for name, path in selected.items():
            title, condition = gates.describe(path)
            print(f"{name}  {title}\n      {condition}")
        return EXIT_OK
    config_name(args.model, "cut")
    load_contract(args.contract)
    gates.check_device(args.device)
    out = Path(args.out or f"runs/gates-{time.strftime('%Y%m%dT%H%M%S')}")
    statuses = gates.run(selected, model=args.model, contract=args.contract, out=out)
    print(gates.format_table(statuses, out))
    return EXIT_DIFFERENT if "fail" in statuses.values() else EXIT_OK


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
        return {"diff": _diff, "gates": _gates}[args.verb](args)
    except ValueError as error:
        print(f"harness {args.verb}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
