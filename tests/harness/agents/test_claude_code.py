"""The `claude-code` agent backend: clear errors when its CLI, its SDK or credentials are
missing (when the backend is made, before any worktree), the wall-clock budget, and the SDK
options that keep the agent in the harness's confined tools. The fixtures: conftest.py."""
import sys
import time

import pytest

from harness.agents import claude_code, make_backend
from harness.agents.base import AgentLimits, Tool
from tests.harness.agents.planted_task import agent_task


def test_claude_code_without_cli_or_sdk_names_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(claude_code, "_bundled_cli", lambda sdk: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ValueError, match="npm install -g @anthropic-ai/claude-code"):
        make_backend("claude-code")
    with pytest.raises(ValueError, match="cli_path="):
        make_backend("claude-code", cli_path=str(tmp_path / "missing" / "claude"))
    monkeypatch.setitem(sys.modules, "claude_agent_sdk", None)
    with pytest.raises(ValueError, match="pip install claude-agent-sdk"):
        make_backend("claude-code")


def _fake_cli(tmp_path):
    cli = tmp_path / "claude"
    cli.write_text("#!/bin/sh\n")
    cli.chmod(0o755)
    return cli


def _no_claude_credentials(monkeypatch, config_dir):
    for name in claude_code.CREDENTIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config_dir))


def test_claude_code_without_credentials_names_what_to_set(monkeypatch, tmp_path):
    """Refused when the backend is made (before any worktree), not after the pipeline ran."""
    cli, config = _fake_cli(tmp_path), tmp_path / "claude-config"
    _no_claude_credentials(monkeypatch, config)
    with pytest.raises(ValueError, match="no credentials: set ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN"):
        make_backend("claude-code", cli_path=str(cli))
    config.mkdir()
    (config / ".credentials.json").write_text("{}")  # what `claude` login writes
    assert make_backend("claude-code", cli_path=str(cli)).cli_path == str(cli)
    (config / ".credentials.json").unlink()
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "token")
    assert make_backend("claude-code", cli_path=str(cli)).cli_path == str(cli)


def test_claude_code_stops_at_the_wall_clock_budget(worktree, monkeypatch, tmp_path):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    backend = make_backend("claude-code", cli_path=str(_fake_cli(tmp_path)))

    async def endless(task, tally, log):  # a CLI that never ends its query
        import asyncio
        tally["turns"] = 3
        await asyncio.sleep(30)
    monkeypatch.setattr(backend, "_stream", endless)
    started = time.monotonic()
    result = backend.run(agent_task(worktree, AgentLimits(max_wall_s=0.5, command_timeout_s=60)))
    assert result.status == "limit:time" and result.turns == 3 and time.monotonic() - started < 5
    assert "time limit" in result.final_text


def test_claude_code_options(worktree, tmp_path, monkeypatch):
    import claude_agent_sdk  # noqa: F401  (the test extra installs it: this test must run, not skip)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    cli = _fake_cli(tmp_path)
    run_gates = Tool("run_gates", "Run the gates.", {"type": "object", "properties": {}}, lambda _: "ok")
    limits = AgentLimits(max_turns=7, max_cost_usd=3.0, command_timeout_s=120)
    options = make_backend("claude-code", cli_path=str(cli), model="claude-sonnet-5").options(
        agent_task(worktree, limits, {"run_gates": run_gates}))
    assert options.cwd == str(worktree) and options.cli_path == str(cli) and options.model == "claude-sonnet-5"
    assert options.setting_sources == ["project"] and options.skills == "all"
    assert (options.max_turns, options.max_budget_usd, options.permission_mode) == (7, 3.0, "dontAsk")
    assert {"mcp__harness__run_gates", "mcp__harness__run_command", "mcp__harness__write_file",
            "mcp__harness__edit_file"} <= set(options.allowed_tools)
    unconfined = {"Bash", "Edit", "Write", "WebFetch"}  # they would run outside the sandbox
    assert not unconfined & (set(options.tools) | set(options.allowed_tools)) and unconfined <= set(
        options.disallowed_tools)
    assert list(options.mcp_servers) == ["harness"]
