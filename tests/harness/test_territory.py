"""Each agent's territory under kernels/ (harness/territory.py), checked by the tamper scan: a
baseline agent editing a consistent file, or a consistent agent editing a fast one, is reported
as tampering; edits inside a territory, to shared engine code or outside kernels/ are not."""
import subprocess

import pytest

from harness.tamper import scan
from harness.territory import allowed, trespasses


def _git(repo, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


FILES = ("kernels/ops/linear/fast.py", "kernels/ops/linear/consistent.py", "kernels/ops/linear/triton.py",
         "kernels/contract/fast.yaml", "kernels/contract/consistent.yaml", "kernels/engine/scheduler.py",
         "tests/test_linear.py")


@pytest.fixture
def worktree(tmp_path):
    repo = tmp_path / "worktree"
    repo.mkdir()
    _git(repo, "init", "-q")
    for name in FILES:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("SPLIT_K = 1\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    return repo, _git(repo, "rev-parse", "HEAD")


def _edit(repo, *names):
    for name in names:
        (repo / name).write_text("SPLIT_K = 4\n")
    _git(repo, "commit", "-qam", "an edit")


def test_a_baseline_agent_editing_a_consistent_file_is_a_trespass(worktree):
    repo, base = worktree
    _edit(repo, "kernels/ops/linear/fast.py", "kernels/contract/fast.yaml", "kernels/engine/scheduler.py",
          "tests/test_linear.py")
    assert scan(repo, base, None, role="baseline") == []  # the control: its own files, shared code, tests
    _edit(repo, "kernels/ops/linear/consistent.py")
    violations = scan(repo, base, None, role="baseline")
    assert violations == ["the baseline agent changed kernels/ops/linear/consistent.py, outside its territory "
                          "(the fast variants (kernels/ops/<family>/fast*.py), kernels/contract/fast.yaml and the "
                          "shared engine (kernels/engine/))"], violations
    assert scan(repo, base, None) == []  # without a role (the harness's own runs): no territory


def test_a_consistent_agent_editing_the_fast_path_is_a_trespass(worktree):
    repo, base = worktree
    _edit(repo, "kernels/ops/linear/consistent.py", "kernels/ops/linear/triton.py", "kernels/contract/consistent.yaml")
    assert scan(repo, base, None, role="consistent") == []
    _edit(repo, "kernels/contract/fast.yaml")
    assert [v.split(",")[0] for v in scan(repo, base, None, role="consistent")] == [
        "the consistent agent changed kernels/contract/fast.yaml"]


def test_territories_by_path():
    assert allowed("baseline", "kernels/ops/ssm_scan/fast_triton.py")
    assert not allowed("baseline", "kernels/ops/ssm_scan/triton.py")
    assert not allowed("baseline", "kernels/models/qwen3.py")
    assert allowed("consistent", "kernels/models/qwen3.py") and not allowed("consistent", "kernels/ops/norm/fast.py")
    assert trespasses("consistent", ["guides/x.md", "kernels/ops/norm/fast.py"]) != []
    with pytest.raises(ValueError, match="no territory for role 'reviewer'"):
        allowed("reviewer", "kernels/ops/norm/fast.py")
