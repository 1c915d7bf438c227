"""`harness run`: the whole workflow minus the edit, resumable from its run directory.
gates -> diff (consistent and fast, for the report's plot) -> (if a gate failed) locate -> shrink
-> [agents] -> profile -> report, each stage's raw output written into RUN_DIR before anything
summarises it (harness/run_directory.md). run.json records each stage's status, so `harness run
--out RUN_DIR` skips what is done (gates one by one) and re-runs the stage that was cut off. With
`--agent none` (the default, no credentials) nobody edits `kernels/`: the report says what to fix;
with `--agent anthropic` or `claude-code` two agents work in their own clones (stages/agents.py).
`--target T --checkpoint DIR` runs it on another stack (stages/target_run.py).
"""
import json
import time
from pathlib import Path

from gates.workload import Workload
from harness.agents import make_backend
from harness.exit_codes import EXIT_DIFFERENT, EXIT_INCONCLUSIVE, EXIT_OK
from harness.stages import agents as agents_stage
from harness.stages import gates as gates_stage
from harness.stages import locate as locate_stage
from harness.stages import profile as profile_stage
from harness.stages import report as report_stage
from harness.stages import shrink as shrink_stage
from harness.stages.checkpoint_option import add_model_options, checkpoint_path, model_of
from harness.stages.diff import run_diff
from harness.stages.run_state import RunState
from harness.stages.target_option import add_target_option, model_for_target
from harness.stages.target_run import run_outside

AGENTS = ("none", "anthropic", "claude-code")
DIFF_WORKLOAD = Workload(num_sequences=16, new_tokens=16)


def _gates(state, args, selected):
    out = state.out / "gates"
    missing = {name: path for name, path in selected.items() if not (out / f"{name}.json").exists()}
    gates_stage.run_gates(missing, model=args.model, contract=args.contract, out=out, device=args.device,
                          checkpoint=checkpoint_path(args))
    statuses = {name: json.loads((out / f"{name}.json").read_text())["status"]
                if (out / f"{name}.json").exists() else "fail" for name in selected}
    failed = [name for name, status in statuses.items() if status == "fail"]
    undecided = [name for name, status in statuses.items() if status == "inconclusive"]
    parts = ([f"failed: {', '.join(failed)}"] if failed else []) + (
        [f"inconclusive: {', '.join(undecided)}"] if undecided else [])
    return "done", "; ".join(parts) or "all pass or n/a"


def _device_note(args) -> str:
    """Only the gates stage runs on the GPU so far: the other stages say where they ran."""
    return "" if args.device == "cpu" else "ran on cpu: with --device cuda only the gates run on the GPU so far"


def _noted(message: str, args) -> str:
    """A locate or profile stage's detail, with where it ran and on what."""
    notes = [_device_note(args)] + ([f"on the {args.model} cut: locate and profile do not take a checkpoint yet"]
                                     if args.checkpoint else [])
    notes = [n for n in notes if n]
    return f"{message} ({'; '.join(notes)})" if notes else message


def _diff(state, args):
    out = state.out / "diff"
    out.mkdir(parents=True, exist_ok=True)
    under_test = "consistent" if args.contract == "fast" else args.contract  # the plot's contrast to fast
    for name, contract in (("consistent", under_test), ("fast", "fast")):
        result = run_diff(args.model, "cut", contract, DIFF_WORKLOAD, per_token=True,
                          checkpoint=checkpoint_path(args))
        (out / f"{name}.json").write_text(json.dumps(result, sort_keys=True))
    return "done", _device_note(args)


def _failed_gates(state) -> list:
    return state.gates_with("fail")


def _locate(state, args):
    if not _failed_gates(state):
        return "skipped", "every gate passed"
    result = locate_stage.locate(args.model, args.contract, state.out / "locate")
    return "done", _noted(locate_stage.format_result(result).splitlines()[0], args)


def _shrink(state, args):
    located = state.out / "locate" / "locate.json"
    if not located.exists() or json.loads(located.read_text())["status"] != "divergent":
        return "skipped", "no divergence located"
    summary = shrink_stage.shrink(state.out / "locate", state.out / "repros")
    return "done", shrink_stage.format_summary(summary).splitlines()[0]


def _profile(state, args):
    try:
        result = profile_stage.profile(args.model, state.out / "profile", pairs=args.pairs)
    except profile_stage.BaselineLacksModel as error:
        return "skipped", f"n/a: {error}"
    throughput = result["rollout_tokens_per_s"]
    low, high = throughput["noise"]
    return "done", _noted(f"rollout throughput (CPU time) consistent / baseline = {throughput['ratio']:.3f} "
                          f"[{low:.3f}, {high:.3f}]", args)


def _summary(state) -> str:
    lines = [f"harness run: model {state.data['model']}, contract {state.data['contract']}, "
             f"commit {state.data['commit'][:12]}"]
    for name, stage in state.data["stages"].items():
        lines.append(f"  {name:<18}{stage['status']:<9}{stage['detail'].splitlines()[0] if stage['detail'] else ''}")
    lines.append(f"report: {state.out / 'report.html'}  (and report.md)")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    add_model_options(parser, "nemotron")
    parser.add_argument("--contract", default="consistent", help="the contract under test (fast, consistent, PATH)")
    parser.add_argument("--agent", default="none", help=f"agent backend: {', '.join(AGENTS)}")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--gates", help="only these gates, e.g. C0,C7 (default: all)")
    parser.add_argument("--pairs", type=int, default=3, help="profile: A B pairs")
    parser.add_argument("--skip", type=lambda text: set(text.split(",")), default=set(),
                        help="stages not to run, e.g. profile (recorded as skipped in run.json)")
    parser.add_argument("--agent-model", default="",
                        help="agent model (default: the backend's, or BITWISE_AGENT_MODEL)")
    parser.add_argument("--max-turns", type=int, default=150, help="per agent")
    parser.add_argument("--max-cost-usd", type=float, default=25.0, help="per agent")
    parser.add_argument("--max-wall-s", type=float, default=4 * 3600.0,
                        help="wall-clock budget per agent, model calls and retries included")
    parser.add_argument("--out", help="run directory; an existing one is resumed (default runs/<model>-<time>)")
    add_target_option(parser)
    parser.add_argument("--allow-new-commit", action="store_true",
                        help="resume a run whose HEAD moved since it started (the commits are recorded)")


def run(args) -> int:
    if args.skip - {"profile"}:
        raise ValueError(f"--skip: only 'profile' can be skipped, not {sorted(args.skip - {'profile'})}")
    if args.agent not in AGENTS:
        raise ValueError(f"unknown agent backend {args.agent!r}; available here: {AGENTS}")
    if args.target != "ours":
        if args.agent != "none":
            raise ValueError(f"--agent {args.agent}: the agents edit our kernels; --target {args.target} takes none")
        args.model = model_for_target(args)
        args.checkpoint = checkpoint_path(args)
        return run_outside(args, gates_stage.select(args.gates))
    args.model = model_of(args, "nemotron")
    gates_stage.validate(args.model, args.contract, args.device)
    backend = None if args.agent == "none" else make_backend(args.agent)  # credentials: before any stage
    selected = gates_stage.select(args.gates)
    out = Path(args.out or f"runs/{args.model}-{time.strftime('%Y%m%dT%H%M%S')}")
    asked = {"model": args.model, "contract": args.contract, "device": args.device, "agent": args.agent,
             "gates": sorted(selected), "checkpoint": checkpoint_path(args)}
    state = RunState(out, asked, allow_new_commit=args.allow_new_commit)
    state.run_stage("gates", lambda: _gates(state, args, selected))
    state.run_stage("diff", lambda: _diff(state, args))
    state.run_stage("locate", lambda: _locate(state, args))
    state.run_stage("shrink", lambda: _shrink(state, args))
    if args.agent != "none":
        state.run_stage("agents", lambda: agents_stage.run_agents(state, args, backend))
    if "profile" not in args.skip:
        state.run_stage("profile", lambda: _profile(state, args))
    elif state.status("profile") is None:
        state.mark("profile", "skipped", "asked to skip (--skip profile)")
        print("[profile] skipped (--skip profile)", flush=True)
    state.mark("report", "done", "report.md and report.html")  # marked first: the report shows its own row
    try:
        report_stage.render(out)
    except Exception as error:
        state.mark("report", "failed", str(error))
        raise
    print(_summary(state))
    if args.agent != "none":
        result = agents_stage.consistent_result(out)
        clean = (state.status("agents") == "done" and result and  # an agent that crashed or errored: not clean
                 result["after"].startswith("revalidated: all gates pass") and "TAMPERING" not in result["after"])
        return EXIT_OK if clean else EXIT_DIFFERENT
    if _failed_gates(state):
        return EXIT_DIFFERENT
    return EXIT_INCONCLUSIVE if state.gates_with("inconclusive") else EXIT_OK
