"""`harness run --target T --checkpoint DIR`: the workflow on a stack we did not write. The gates
(those needing our contract or doors say n/a), diff (its generate against its trainer side,
per token), locate (its first divergent module, or why not), then a report a person acts on
(harness/stages/target_report.py). Shrink, the agents and profile work on our kernels only:
recorded as skipped with the reason. Resumable from its run directory like `harness run`.
"""
import json
import time
from pathlib import Path

from gates.workload import Workload
from harness.exit_codes import EXIT_DIFFERENT, EXIT_INCONCLUSIVE, EXIT_OK
from harness.stages import gates as gates_stage
from harness.stages import target_report
from harness.stages.diff import run_diff
from harness.stages.run_state import RunState
from harness.stages.target_locate import format_outside, locate_outside

DIFF_WORKLOAD = Workload(num_sequences=16, new_tokens=16)
OURS_ONLY = ("shrink", "agents", "profile")


def _gates(state, args, selected):
    gates_stage.run_gates(selected, model=args.model, contract="consistent", out=state.out / "gates",
                          device=args.device, checkpoint=args.checkpoint, target=args.target)
    failed = state.gates_with("fail")
    return "done", f"failed: {', '.join(failed)}" if failed else "none failed"


def _diff(state, args):
    (state.out / "diff").mkdir(parents=True, exist_ok=True)
    result = run_diff(args.model, "cut", "consistent", DIFF_WORKLOAD, per_token=True, checkpoint=args.checkpoint,
                      target=args.target)
    (state.out / "diff" / "target.json").write_text(json.dumps(result, sort_keys=True))
    return "done", f"{result['frac_tokens_differing']:.1%} of {result['num_tokens']} log-probs differ"


def _locate(state, args):
    result = locate_outside(args.target, args.checkpoint, state.out / "locate")
    return ("skipped" if result["status"] == "n/a" else "done"), format_outside(result)


def run_outside(args, selected: dict) -> int:
    """The run for args.target (not ours) on args.checkpoint; the exit code as `harness run`'s."""
    out = Path(args.out or f"runs/{args.target}-{time.strftime('%Y%m%dT%H%M%S')}")
    asked = {"target": args.target, "checkpoint": args.checkpoint, "device": args.device, "gates": sorted(selected)}
    state = RunState(out, asked, allow_new_commit=args.allow_new_commit)
    state.run_stage("gates", lambda: _gates(state, args, selected))
    state.run_stage("diff", lambda: _diff(state, args))
    state.run_stage("locate", lambda: _locate(state, args))
    for stage in OURS_ONLY:
        if state.status(stage) is None:
            state.mark(stage, "skipped", f"target {args.target}: the {stage} stage works on our kernels only")
    state.mark("report", "done", "report.md and report.html")
    written = target_report.render(out)
    print(f"harness run: target {args.target} on {args.checkpoint}")
    for name, stage in state.data["stages"].items():
        print(f"  {name:<10}{stage['status']:<9}{stage['detail'].splitlines()[0]}")
    print(f"report: {written['report.html']}  (and report.md)")
    return EXIT_DIFFERENT if state.gates_with("fail") else EXIT_INCONCLUSIVE if state.gates_with("inconclusive") \
        else EXIT_OK
