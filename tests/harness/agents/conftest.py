"""Fixtures of the agent backends' tests: a worktree holding a planted fault and its repro,
and, for every test here, an environment where the loopback fake Messages server is reached
directly (NO_PROXY) and no BITWISE_AGENT_MODEL picks the model."""
import pytest

from tests.harness.agents.planted_task import REPRO


@pytest.fixture
def worktree(tmp_path):
    root = tmp_path / "worktree"
    (root / "repros" / "x").mkdir(parents=True)
    (root / "kernels").mkdir()
    (root / "repros" / "x" / "test_repro.py").write_text(REPRO)
    (root / "kernels" / "op.py").write_text("SCALE = 1.0 + 2**-20  # planted fault\n")
    return root


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.delenv("BITWISE_AGENT_MODEL", raising=False)
