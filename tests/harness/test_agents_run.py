"""`harness run --agent anthropic` end to end, against a local fake Messages server (the real
`anthropic` client, loopback only): in a snapshot of this repository with a fault planted in
the consistent contract (SiLU*up rounded twice in decode), the consistent agent reads the
repro, edits the fault out of kernels/, is killed mid-run with the harness, and after the
restart continues in its clone, commits and runs the gates; all gates then pass when the
harness revalidates. At the same time the baseline agent edits gates/, adds a conftest.py and
rewrites the frozen record: the tamper scan catches it and its work is not frozen. The main
checkout is never touched; the report shows both agents."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fake_messages_server import FakeMessagesServer, text, tool_use

ROOT = Path(__file__).resolve().parents[2]
PLANTED = "    engine_decode: {impl: activation.fast}\n"


def git(repo, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def snapshot(tmp_path) -> Path:
    """A clone of this repository with the working tree's files committed on top, then the
    planted fault committed (so the test judges this tree as it is, edits included)."""
    repo = tmp_path / "repo"
    git(tmp_path, "clone", "-q", str(ROOT), str(repo))
    git(repo, "config", "user.email", "test@example.com")
    git(repo, "config", "user.name", "test")
    listed = git(ROOT, "ls-files", "--cached", "--others", "--exclude-standard", "-z").split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_bytes(source.read_bytes())
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "snapshot of the tree under test")
    contract = repo / "kernels" / "contract" / "consistent.yaml"
    contract.write_text(contract.read_text().replace("    engine_decode: *mlp_act_0\n", PLANTED))
    git(repo, "commit", "-qam", "plant: SiLU*up rounded twice in decode")
    return repo


def _role(request) -> str:
    return "baseline" if "BASELINE agent" in json.dumps(request.get("system")) else "consistent"


class Router:
    """One scripted conversation per agent, picked by the brief in the system prompt."""

    def __init__(self, scripts: dict):
        self.scripts = {role: list(steps) for role, steps in scripts.items()}

    def __call__(self, request):
        step = self.scripts[_role(request)].pop(0)
        return step(request) if callable(step) else step


def _stage_status(run_dir, stage):
    """The stage's status in run.json, or None while it is missing or being rewritten."""
    try:
        return json.loads((run_dir / "run.json").read_text())["stages"].get(stage, {}).get("status")
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _kill_harness(process, run_dir):
    """Step of the consistent agent: wait until run.json records the baseline agent done (its
    result.json is written a moment earlier: a kill in between failed CI once), then kill
    the whole harness process group (as a person would with kill -9)."""
    def step(request):
        deadline = time.time() + 240
        while _stage_status(run_dir, "agent:baseline") != "done" and time.time() < deadline:
            time.sleep(0.5)
        os.killpg(process["proc"].pid, signal.SIGKILL)
        return [text("(killed)")]
    return step


def _harness(repo, run_dir, server) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(repo), "ANTHROPIC_API_KEY": "test-key",
           "ANTHROPIC_BASE_URL": server.base_url, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "harness.cli", "run", "--model", "qwen3", "--agent", "anthropic",
                             "--gates", "C0,C7", "--skip", "profile", "--out", str(run_dir)],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def test_two_agents_fix_resume_and_tamper(tmp_path):
    repo = snapshot(tmp_path)
    run_dir = repo / "runs" / "agents-run"
    main_head = git(repo, "rev-parse", "HEAD")
    repro = "runs/repros/mlp_act-layer0-engine_decode/test_repro.py"
    process = {}
    consistent = [
        [tool_use("read_file", path=repro)],
        [tool_use("edit_file", path="kernels/contract/consistent.yaml", old_string=PLANTED,
                  new_string="    engine_decode: *mlp_act_0\n")],
        _kill_harness(process, run_dir),
        # after the restart: a new conversation in the same worktree
        [tool_use("run_command", command=f"{sys.executable} -m pytest -q -p no:cacheprovider {repro}")],
        [tool_use("run_command", command='git commit -qam "Decode SiLU*up rounds once (gates: C00 pass, C07 pass)"')],
        [tool_use("run_gates", only="C0,C7")],  # the tools judge the last commit
        [text("All gates pass.")],
    ]
    baseline = [
        [tool_use("write_file", path="conftest.py", content="def pytest_runtest_makereport(): pass\n")],
        [tool_use("edit_file", path="gates/test_c07_end_to_end.py", old_string="Passes when",
                  new_string="Always passes when")],
        [tool_use("write_file", path="baseline/frozen.json", content='{"tag": "mine"}\n')],
        [tool_use("run_command", command="git add -A && git commit -qm faster")],
        [text("The fast path is fast now.")],
    ]
    router = Router({"consistent": consistent, "baseline": baseline})
    with FakeMessagesServer([router] * (len(consistent) + len(baseline))) as server:
        process["proc"] = _harness(repo, run_dir, server)
        first_output = process["proc"].communicate(timeout=900)[0]
        assert process["proc"].returncode == -signal.SIGKILL, first_output[-3000:]
        stages = json.loads((run_dir / "run.json").read_text())["stages"]
        assert stages["agent:consistent"]["status"] == "running" and stages["agent:baseline"]["status"] == "done"
        process["proc"] = _harness(repo, run_dir, server)
        output = process["proc"].communicate(timeout=900)[0]
    assert process["proc"].returncode == 0, output[-4000:]
    assert "[gates] done already (resumed)" in output and "[agent:baseline] done already (resumed)" in output
    consistent_result = json.loads((run_dir / "agents" / "consistent" / "result.json").read_text())
    assert consistent_result["status"] == "finished"
    commits = json.loads((run_dir / "agents" / "consistent" / "commits.json").read_text())
    assert [c["subject"] for c in commits] == ["Decode SiLU*up rounds once (gates: C00 pass, C07 pass)"]
    # judged: a fresh checkout of that commit
    assert consistent_result["after"] == f"revalidated: all gates pass or n/a (commit {commits[0]['sha'][:12]})", \
        consistent_result
    assert len(list((run_dir / "agents" / "consistent").glob("transcript-*.jsonl"))) == 2
    baseline_result = json.loads((run_dir / "agents" / "baseline" / "result.json").read_text())
    assert baseline_result["after"].startswith("not frozen; TAMPERING"), baseline_result
    for caught in ("gates/test_c07_end_to_end.py", "conftest.py", "baseline/frozen.json"):
        assert caught in baseline_result["after"]
    assert git(repo, "rev-parse", "HEAD") == main_head and git(repo, "status", "--porcelain") == ""
    assert PLANTED in (repo / "kernels" / "contract" / "consistent.yaml").read_text()  # main checkout untouched
    report = (run_dir / "report.html").read_text()
    assert "consistent agent" in report and "baseline agent" in report and "tampering found" in report
