"""harness/secrets.py: a credential in the harness's environment reaches neither a judge
process (the pristine apparatus's environment) nor an agent's shell command, and a transcript
line that carries one is written redacted; the allow-list keeps what the processes need."""
import json
import subprocess
import sys

from harness.agents.base import append_transcript
from harness.agents.worktree_tools import run_command
from harness.pristine import Isolation
from harness.secrets import allowed_environment, redact

FAKE_KEY = "sk-ant-api03-" + "x7Q" * 12
SECRETS = {"ANTHROPIC_API_KEY": FAKE_KEY, "OPENAI_API_KEY": "plain-secret-value-42",
           "BITWISE_AUTH_TOKEN": "bitwise-token-value-99", "AWS_SECRET_ACCESS_KEY": "aws-secret-value-7"}


def _with_secrets(monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("BITWISE_C10_MAX_PAIRS", "3")


def test_an_agents_shell_sees_no_credential(monkeypatch, tmp_path):
    _with_secrets(monkeypatch)
    printed = run_command(tmp_path, 30, f"{sys.executable} -c 'import os, json; print(json.dumps(dict(os.environ)))'")
    environment = json.loads(printed[printed.index("{"):printed.rindex("}") + 1])
    assert not set(SECRETS) & set(environment), sorted(set(SECRETS) & set(environment))
    assert not any(v in printed for v in SECRETS.values())
    assert environment.get("BITWISE_C10_MAX_PAIRS") == "3" and "PATH" in environment


def test_a_judge_process_sees_no_credential(monkeypatch, tmp_path):
    _with_secrets(monkeypatch)
    isolation = Isolation(apparatus=tmp_path / "apparatus", tree=tmp_path / "tree", base="HEAD",
                          tamper_report=tmp_path / "tamper.json")
    env = isolation.env()
    child = subprocess.run([sys.executable, "-c", "import os, json; print(json.dumps(dict(os.environ)))"],
                           env=env, capture_output=True, text=True, check=True)
    seen = json.loads(child.stdout)
    assert not set(SECRETS) & set(seen) and seen["BITWISE_TREE"] == str(tmp_path / "tree")


def test_a_transcript_line_is_written_redacted(monkeypatch, tmp_path):
    _with_secrets(monkeypatch)
    path = tmp_path / "transcript.jsonl"
    append_transcript(path, "tool_result", content=f"env: ANTHROPIC_API_KEY={FAKE_KEY} and {SECRETS['OPENAI_API_KEY']}")
    append_transcript(path, "tool_result", content="an unrelated sk-ant-admin01-abcdefghijkl key")
    text = path.read_text()
    assert not any(v in text for v in SECRETS.values()) and "sk-ant-admin01" not in text
    assert text.count("[redacted]") == 3, text


def test_the_allow_list_keeps_settings_and_drops_what_looks_secret():
    base = {"PATH": "/bin", "LC_ALL": "C", "BITWISE_SEED": "1", "BITWISE_API_KEY": "k" * 10, "HOME": "/h",
            "RANDOM_THING": "x"}
    assert allowed_environment(base, EXTRA="1") == {"PATH": "/bin", "LC_ALL": "C", "BITWISE_SEED": "1",
                                                    "HOME": "/h", "EXTRA": "1"}
    assert redact("value kkkkkkkkkk here", base) == "value [redacted] here"


def _git(repo, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_a_secret_an_agent_commits_or_writes_is_a_tamper_violation(monkeypatch, tmp_path):
    """The tamper scan names the commit and the file that hold a secret of the harness's
    environment, without quoting it; a clean change has no such violation (the control)."""
    from harness.tamper import scan
    _with_secrets(monkeypatch)
    repo = tmp_path / "worktree"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "kernels").mkdir()
    (repo / "kernels" / "op.py").write_text("SCALE = 1.0\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "kernels" / "op.py").write_text("SCALE = 1.0  # an honest edit\n")
    _git(repo, "commit", "-qam", "ops: an honest edit")
    assert scan(repo, base, None) == []
    _git(repo, "commit", "-q", "--allow-empty", "-m", f"debug: key was {SECRETS['OPENAI_API_KEY']}")
    (repo / "notes.txt").write_text(f"read from /proc: {FAKE_KEY}\n")  # untracked, not ignored
    violations = scan(repo, base, None)
    assert any("message holds a secret" in v for v in violations), violations
    assert "notes.txt holds a secret" in violations, violations
    assert not any(value in " ".join(violations) for value in SECRETS.values())


def test_a_report_is_written_redacted(monkeypatch, tmp_path):
    from harness.stages.report import render
    _with_secrets(monkeypatch)
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"model": "qwen3", "stages": {
        "profile": {"status": "failed", "detail": f"endpoint refused key {SECRETS['BITWISE_AUTH_TOKEN']}"}}}))
    written = render(run)
    for name in ("report.md", "report.html"):
        text = written[name].read_text()
        assert "endpoint refused key [redacted]" in text and SECRETS["BITWISE_AUTH_TOKEN"] not in text, name

