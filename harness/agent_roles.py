"""The two agents' briefs and the harness tools they get beside the worktree file tools.
baseline: makes the fast path fast (correct against the float64 references), then stops; the
harness freezes its last commit and puts it up for human review. consistent: walks the gates
C00..C10 against the frozen baseline: locate -> shrink -> fix -> revalidate, one logical fix per
commit with the gate results in the message. The harness tools judge the agent's last commit,
checked out by the harness (uncommitted edits are not judged), from the pristine copy of gates/
and harness/ after a tamper scan (harness/pristine.py, harness/tamper.py); their results are also
saved under the agent's directory in the run.
"""
import json
import subprocess
import sys
from pathlib import Path

from harness.agents.base import Tool
from harness.stages import gates as gates_stage
from harness.tamper import write_report

RULES = ("""Rules (the harness checks them and fails gate C00 on any violation):
- Never edit gates/, harness/ or baseline/ (the frozen baseline), and add no conftest.py,
  sitecustomize.py, usercustomize.py or .pth file. The gates run from the harness's own copy.
- One logical fix per commit (`git commit -am "<what> (gates: C03 pass, C07 pass)"`), with the
  gate results in the message. The harness tools judge your last commit: commit, then run them. """
         """Performance claims only from the frozen baseline's figures.
- The skill .agents/skills/bitwise-align/SKILL.md and the guides/ describe the procedure.""")

BRIEFS = {
    "baseline": """You are the BASELINE agent of a bitwise-align run on model {model}.
Make the fast path as fast as a real engine would run it, keeping it correct against the
float64 references (`python -m pytest tests/ops/test_ops_reference.py -q`). Your territory under
kernels/ is {territory}; a change elsewhere under kernels/ is reported as tampering. When you are
done, say so: the harness freezes your last commit as the new baseline and puts it up for
human review.
{rules}""",
    "consistent": """You are the CONSISTENT agent of a bitwise-align run on model {model}, contract {contract}.
Make every gate pass (run_gates), working on the model's cut: start from C00, then for each
failing gate: locate -> shrink -> read the repro -> fix kernels/ -> revalidate ALL gates.
Your territory under kernels/ is {territory}; a change elsewhere under kernels/ is reported as
tampering.
{situation}
{rules}""",
}


def situation(run_dir: Path) -> str:
    """What the harness already found, for the consistent agent's brief."""
    failed = sorted(p.stem for p in (run_dir / "gates").glob("C*.json")
                    if json.loads(p.read_text())["status"] == "fail")
    lines = [f"Gates failing on the base commit: {', '.join(failed) or 'none'}."]
    located = run_dir / "locate" / "locate.json"
    if located.exists():
        result = json.loads(located.read_text())
        lines.append(f"locate: {result['status']}, layer {result.get('layer')}, region {result.get('region')}, "
                     f"cases {result.get('cases')}, token {result.get('token')}.")
    for repro in sorted(run_dir.glob("repros/*/repro.json")):
        lines.append(f"A repro was copied into your worktree: runs/repros/{repro.parent.name}/test_repro.py "
                     f"(read it; run it with `python -m pytest runs/repros/{repro.parent.name}/test_repro.py`; "
                     "runs/ is git-ignored).")
    return "\n".join(lines)


def _run_gates_tool(role: str, role_dir: Path, isolation_for, model: str, contract: str, frozen_outside) -> Tool:
    runs = {"count": 0}

    def handler(tool_input: dict) -> str:
        runs["count"] += 1
        isolation = isolation_for(role_dir / "tamper" / f"scan-{runs['count']}.json")
        violations = write_report(isolation.tamper_report, isolation.tree, isolation.base, frozen_outside, role=role)
        out = role_dir / "gates" / f"run-{runs['count']}"
        selected = gates_stage.select(tool_input.get("only"))
        statuses = gates_stage.run_gates(selected, model=model, contract=contract, out=out, isolation=isolation)
        table = gates_stage.format_table(statuses, out)
        return table + (f"\ntamper scan: {violations}" if violations else "")

    return Tool("run_gates", "Run the gates against your last commit (commit first: uncommitted edits are not "
                "judged) from the harness's pristine copy; "
                "`only` is e.g. 'C3,C7' (default all). Returns the table and the failed conditions; the "
                "C<NN>.json files are listed by path.",
                {"type": "object", "properties": {"only": {"type": "string"}}}, handler)


def _cli_tool(name: str, description: str, schema: dict, argv_for, isolation_for, role_dir: Path) -> Tool:
    """A harness verb run in a subprocess on the agent's kernels, from the pristine copy."""

    def handler(tool_input: dict) -> str:
        isolation = isolation_for(role_dir / "tamper" / f"{name}.json")
        result = subprocess.run([sys.executable, "-m", "harness.cli", *argv_for(tool_input)],
                                cwd=isolation.apparatus, env=isolation.env(), capture_output=True, text=True,
                                timeout=1800)
        return f"exit code: {result.returncode}\n{result.stdout[-6000:]}{result.stderr[-3000:]}"

    return Tool(name, description, schema, handler)


def harness_tools(role: str, role_dir: Path, work_dir: Path, isolation_for, model: str, contract: str,
                  frozen_outside) -> dict:
    """run_gates (results in role_dir, in the run) and locate / shrink (results in work_dir, a
    git-ignored folder of the worktree, so the agent's file tools can read them)."""
    locate_dir = work_dir / "locate"
    tools = [
        _run_gates_tool(role, role_dir, isolation_for, model, contract, frozen_outside),
        _cli_tool("locate", "Trace engine and trainer on your kernels and name the first divergent op "
                  "(writes runs/locate/locate.json and a capture for shrink).",
                  {"type": "object", "properties": {"contract": {"type": "string"}}},
                  lambda i: ["locate", "--model", model, "--contract", i.get("contract") or contract,
                             "--out", str(locate_dir)], isolation_for, role_dir),
        _cli_tool("shrink", "Write a standalone repro from the last locate result (into runs/repros/).",
                  {"type": "object", "properties": {}},
                  lambda i: ["shrink", str(locate_dir), "--out", str(work_dir / "repros")], isolation_for, role_dir),
    ]
    return {tool.name: tool for tool in tools}
