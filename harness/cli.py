"""The `harness` command. main(argv) returns the exit code, so tests call it directly.

  harness run --model nemotron [--agent none] [--device cpu] [--out RUN_DIR]
  harness gates --model nemotron [--only C3,C7] [--contract consistent] [--device cpu] [--out DIR]
  harness diff --model qwen3 [--size cut|full] [--contract consistent|fast|PATH] [--json]
  harness locate | shrink | profile | freeze-baseline | report   (see --help of each)
Each verb lives in harness/stages/<verb>.py (or the module VERBS names) and provides
`add_arguments(parser)` and `run(args) -> exit code`; a ValueError or FileNotFoundError: exit 1.
"""
import argparse
import importlib
import sys
from pathlib import Path

from gates.switches import help_text as switches_help
from harness.exit_codes import EXIT_BAD_INPUT, EXIT_DIFFERENT, EXIT_INCONCLUSIVE, EXIT_OK  # noqa: F401

VERBS = {  # verb -> (module, one-line help)
    "run": ("harness.stages.run", "gates -> locate -> shrink -> profile -> report, resumable"),
    "diff": ("harness.stages.diff", "engine vs trainer per-token log-prob mismatch"),
    "gates": ("harness.stages.gates", "run the gates (C<NN>.json per gate in --out)"),
    "freeze-baseline": ("harness.stages.freeze", "tag HEAD as a device target's frozen baseline, commit its record"),
    "profile": ("harness.stages.profile", "consistent vs the frozen baseline, interleaved, per region"),
    "report": ("harness.stages.report", "render report.md and report.html from a run directory"),
    "rl": ("harness.stages.rl", "GRPO per contract: reward and engine-vs-trainer mismatch per step, plotted"),
    "locate": ("harness.stages.locate", "trace engine and trainer, name the first divergent op"),
    "shrink": ("harness.stages.shrink", "write a standalone repro (and a cut config) from a locate result"),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description=__doc__.splitlines()[0], epilog=switches_help(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True)
    for verb, (module, help_text) in VERBS.items():
        importlib.import_module(module).add_arguments(verbs.add_parser(verb, help=help_text))
    return parser


EXIT_INTERRUPTED = 130  # the shell's code for a command ended by Ctrl-C


def _require_out_directory(args) -> None:
    """--out names a directory (made if missing): a file there is the user's mistake, said
    before any stage runs, not a gate failure minutes later."""
    out = getattr(args, "out", None)
    if out and Path(out).exists() and not Path(out).is_dir():
        raise ValueError(f"--out {out}: is a file, not a directory; name a run directory")


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        _require_out_directory(args)
        return importlib.import_module(VERBS[args.verb][0]).run(args)
    except (ValueError, FileNotFoundError) as error:  # the checkpoint loaders raise the latter, naming the file
        print(f"harness {args.verb}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        resume = f"; resume with --out {args.out}" if getattr(args, "out", None) else ""
        print(f"\nharness {args.verb}: interrupted, nothing recorded is lost{resume}", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
