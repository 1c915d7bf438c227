"""The agents stage's robustness, without a model: agents' clones made at once, an agent that
crashes or ends in error leaves the stage incomplete (a resume runs it again, not the agent
that finished)."""
import subprocess
import threading
import types
from pathlib import Path

from harness.stages import agents as agents_stage
from harness.stages.run_state import RunState
from harness.workspace import agent_clone, open_repo


def _repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (("init", "-q"), ("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
                                  "-m", "root")):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    return repo


def test_agents_clones_made_at_once_exist_each_with_its_own_git_directory(tmp_path):
    """Made at once, each clone is on its branch with a git directory of its own (what its
    agent may write), borrowing the harness's objects read-only."""
    repo = open_repo(_repo(tmp_path))
    made, errors = {}, []

    def make(name):
        try:
            made[name] = agent_clone(repo, f"bitwise/{name}", tmp_path / "trees" / name, "HEAD")
        except Exception as error:  # what the test reports
            errors.append(f"{name}: {type(error).__name__}: {error}")
    for round_ in range(4):  # a race shows up now and then: several rounds of new worktrees
        threads = [threading.Thread(target=make, args=(f"run{round_}-{i}",)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)  # without the lock, threads sharing one Repo were seen to hang
        assert not any(thread.is_alive() for thread in threads), "worktree creation hung"
    assert not errors, errors
    assert len(made) == 24
    for name, path in made.items():
        clone = open_repo(path)
        assert (Path(clone.common_dir).resolve() == (path / ".git").resolve()
                and clone.active_branch.name == f"bitwise/{name}")
        assert (path / ".git" / "objects" / "info" / "alternates").read_text().strip() == str(
            Path(repo.common_dir).resolve() / "objects")


def _state(tmp_path):
    asked = {"model": "nemotron", "contract": "consistent", "device": "cpu", "agent": "anthropic"}
    return RunState(tmp_path / "run", asked)


def test_a_crashed_or_errored_agent_leaves_the_stage_incomplete_and_is_rerun(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(agents_stage, "_frozen_outside", lambda state: {})
    monkeypatch.setattr(agents_stage, "export_apparatus", lambda base, folder: folder)
    calls = []
    outcomes = {"baseline": [lambda: ("done", "finished; frozen")],
                "consistent": [lambda: (_ for _ in ()).throw(RuntimeError("worktree lock held")),
                               lambda: ("error", "error; revalidated: all gates pass or n/a"),
                               lambda: ("done", "finished; revalidated: all gates pass or n/a")]}

    def run_role(role, *args):
        calls.append(role)
        return outcomes[role].pop(0)()
    monkeypatch.setattr(agents_stage, "_run_role", run_role)
    state, args = _state(tmp_path), types.SimpleNamespace()
    assert agents_stage.run_agents(state, args, backend=None) == (
        "incomplete", "baseline: done; consistent: crashed")
    assert "RuntimeError: worktree lock held" in state.data["stages"]["agent:consistent"]["detail"]
    assert "Traceback" in capsys.readouterr().err  # the crash is shown, not swallowed
    state = _state(tmp_path)  # resumed: the finished baseline agent is not run again
    assert agents_stage.run_agents(state, args, backend=None) == ("incomplete", "baseline: done; consistent: error")
    state = _state(tmp_path)
    assert agents_stage.run_agents(state, args, backend=None) == ("done", "baseline: done; consistent: done")
    assert calls == ["baseline", "consistent", "consistent", "consistent"]

