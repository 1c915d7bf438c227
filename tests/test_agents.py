"""Agent backends: the real `anthropic` client against a scripted fake Messages server on
loopback (tests/fake_messages_server.py), the worktree confinement of the tools, limits,
retries, and the clear errors when credentials, SDK or CLI are missing."""
import json
import os
import sys
import time
from pathlib import Path

import pytest

from harness.agents import claude_code, make_backend
from harness.agents.base import AgentLimits, AgentTask, Tool
from harness.agents.worktree_tools import worktree_tools
from tests.fake_messages_server import FakeMessagesServer, overloaded, text, tool_results, tool_use

REPRO = ("import sys\nsys.path.insert(0, '.')\nfrom kernels.op import SCALE\nassert SCALE == 1.0, SCALE\n"
         "print('repro passes')\n")


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


def _task(worktree, limits=None, extra_tools=None):
    return AgentTask(role="consistent", worktree=worktree, instructions="Fix the repro.",
                     limits=limits or AgentLimits(command_timeout_s=60), extra_tools=extra_tools or {},
                     transcript_path=worktree.parent / "transcripts" / "consistent.jsonl")


def _backend(server, **settings):
    return make_backend("anthropic", api_key="test-key", base_url=server.base_url,
                        max_retries=0, backoff_s=0.01, **settings)


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_scripted_agent_reads_edits_runs_and_finishes(worktree):
    gates_run = []
    run_gates = Tool("run_gates", "Run the gates.", {"type": "object", "properties": {}},
                     lambda tool_input: gates_run.append(tool_input) or "all gates pass")
    script = [
        [text("Reading the repro."), tool_use("read_file", path="repros/x/test_repro.py")],
        [tool_use("edit_file", path="kernels/op.py", old_string="1.0 + 2**-20", new_string="1.0")],
        [tool_use("run_command", command=f"{sys.executable} repros/x/test_repro.py")],
        [tool_use("run_gates")],
        [text("done: removed the planted fault")],
    ]
    with FakeMessagesServer(script) as server:
        result = _backend(server, model="claude-test-model", prompt_cache=True).run(
            _task(worktree, extra_tools={"run_gates": run_gates}))
    assert (result.status, result.turns, result.final_text) == ("finished", 5, "done: removed the planted fault")
    assert (result.input_tokens, result.output_tokens) == (5000, 500)
    assert (worktree / "kernels" / "op.py").read_text() == "SCALE = 1.0  # planted fault\n"
    assert gates_run == [{}]
    first = server.requests[0]
    assert first["model"] == "claude-test-model" and first["system"] == "Fix the repro."
    assert first["cache_control"] == {"type": "ephemeral"}
    assert {t["name"] for t in first["tools"]} == {"read_file", "list_dir", "write_file", "edit_file",
                                                  "run_command", "run_gates"}
    results = [tool_results(request)[0] for request in server.requests[1:]]
    assert results[0]["content"] == REPRO
    assert results[1]["content"] == "edited kernels/op.py"
    assert results[2]["content"].startswith("exit code: 0\n") and "repro passes" in results[2]["content"]
    assert results[3]["content"] == "all gates pass" and not any(r["is_error"] for r in results)
    records = _records(result.transcript_path)
    kinds = [r["kind"] for r in records]
    assert kinds.count("request") == kinds.count("response") == 5
    assert kinds.count("tool_call") == kinds.count("tool_result") == 4
    assert kinds[0] == "start" and records[-1]["kind"] == "end" and records[-1]["status"] == "finished"


def test_paths_outside_the_worktree_are_refused(worktree, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (worktree / "link_dir").symlink_to(outside)
    (worktree / "link_file").symlink_to(outside / "secret.txt")
    attempts = [
        tool_use("read_file", path="../outside/secret.txt"),
        tool_use("read_file", path=str(outside / "secret.txt")),
        tool_use("read_file", path="link_dir/secret.txt"),
        tool_use("list_dir", path=".."),
        tool_use("write_file", path="../outside/new.txt", content="x"),
        tool_use("write_file", path=str(outside / "secret.txt"), content="x"),
        tool_use("write_file", path="link_dir/new.txt", content="x"),
        tool_use("edit_file", path="link_file", old_string="secret", new_string="x"),
    ]
    with FakeMessagesServer([attempts, [text("gave up")]]) as server:
        result = _backend(server).run(_task(worktree))
    assert result.status == "finished"
    results = tool_results(server.requests[1])
    assert len(results) == len(attempts)
    for block, attempt in zip(results, attempts):
        assert block["is_error"] and "outside the worktree" in block["content"], (attempt, block)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret"


def test_worktree_tools_errors_and_command_timeout(worktree, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "must-not-leak")
    tools = worktree_tools(worktree, command_timeout_s=0.5)
    lines = tools["read_file"].handler({"path": "kernels/../repros/x/test_repro.py", "start_line": 3, "end_line": 4})
    assert lines == "from kernels.op import SCALE\nassert SCALE == 1.0, SCALE\n"
    assert "matches 0 times" in tools["edit_file"].handler({"path": "kernels/op.py", "old_string": "nope",
                                                           "new_string": ""})
    (worktree / "twice.txt").write_text("a a")
    assert "matches 2 times" in tools["edit_file"].handler({"path": "twice.txt", "old_string": "a", "new_string": "b"})
    assert tools["read_file"].handler({}).startswith("error: TypeError")
    assert tools["write_file"].handler({"path": "new/dir/f.txt", "content": "hi"}) == "wrote 2 chars to new/dir/f.txt"
    assert tools["list_dir"].handler({"path": "new"}) == "dir/"
    # A child of the shell holding the pipe open must not stall the timeout; the cap wins over 60 s.
    out = tools["run_command"].handler({"command": "sleep 30 & sleep 30; echo never", "timeout_s": 60})
    assert out.startswith("error: timed out after 0.5 s") and "never" not in out
    assert (tools["run_command"].handler({"command": "echo key=${ANTHROPIC_API_KEY:-unset}"})
            == "exit code: 0\nkey=unset\n")


@pytest.mark.parametrize("limits, usage, status, num_requests", [
    (AgentLimits(max_turns=2), None, "limit:turns", 2),
    (AgentLimits(max_cost_usd=0.01), {"input_tokens": 1000, "output_tokens": 100}, "limit:cost", 2),
    (AgentLimits(max_total_tokens=3000), {"input_tokens": 1000, "output_tokens": 100}, "limit:tokens", 3),
])
def test_limits_stop_the_loop(worktree, limits, usage, status, num_requests):
    script = [[tool_use("list_dir")]] * 10
    with FakeMessagesServer(script, usage=usage) as server:
        # claude-opus-5-5 costs $4 / $20 per MTok: $0.006 a turn here, so $0.01 is hit after 2.
        result = _backend(server, model="claude-opus-5-5").run(_task(worktree, limits))
    assert (result.status, result.turns, len(server.requests)) == (status, num_requests, num_requests)
    assert _records(result.transcript_path)[-1]["status"] == status


def _late(seconds, reply):
    """A scripted step the server answers only after `seconds`."""
    return lambda request: (time.sleep(seconds), reply)[1]


def test_a_hanging_endpoint_stops_at_the_wall_clock_budget(worktree):
    """A model call that does not answer is cut by request_timeout_s and retried (a timeout is
    a connection error), but never past the agent's max_wall_s: limit:time, not hours."""
    script = [[tool_use("list_dir")]] + [_late(5.0, [text("too late")])] * 6
    limits = AgentLimits(max_wall_s=1.5, request_timeout_s=0.4, command_timeout_s=60)
    started = time.monotonic()
    with FakeMessagesServer(script) as server:
        result = _backend(server).run(_task(worktree, limits))
        elapsed = time.monotonic() - started
    assert result.status == "limit:time" and result.turns == 1, (result.status, result.final_text)
    assert "time limit" in result.final_text and elapsed < 4.0, elapsed
    assert len(server.requests) >= 2  # the hanging call was retried inside the budget
    assert _records(result.transcript_path)[-1]["status"] == "limit:time"


def test_a_command_is_cut_to_the_wall_clock_budget_left(worktree):
    script = [[tool_use("run_command", command="sleep 20", timeout_s=600)], [text("never sent")]]
    started = time.monotonic()
    with FakeMessagesServer(script) as server:
        result = _backend(server).run(_task(worktree, AgentLimits(max_wall_s=1.5, command_timeout_s=900)))
    assert result.status == "limit:time" and time.monotonic() - started < 6 and len(server.requests) == 1
    killed = [r for r in _records(result.transcript_path) if r["kind"] == "tool_result"][0]["content"]
    assert killed.startswith("error: timed out after 1"), killed


def test_the_wall_clock_budget_stops_a_slow_loop_between_turns(worktree):
    script = [_late(0.3, [tool_use("list_dir")])] * 20
    with FakeMessagesServer(script) as server:
        result = _backend(server).run(_task(worktree, AgentLimits(max_wall_s=1.0, command_timeout_s=60)))
    assert result.status == "limit:time" and 2 <= result.turns <= 5 and len(server.requests) < 20


@pytest.mark.parametrize("failure, settings, retry_records", [
    (overloaded(), {"max_retries": 0}, 1),                       # our backoff retries the 529
    (overloaded(retry_after_ms=10), {"max_retries": 2}, 0),     # the client's own retry does
    ({"status": 500}, {"max_retries": 0}, 1),
])
def test_overload_is_retried_and_the_run_finishes(worktree, failure, settings, retry_records):
    with FakeMessagesServer([failure, [text("done")]]) as server:
        backend = make_backend("anthropic", api_key="k", base_url=server.base_url, backoff_s=0.01, **settings)
        result = backend.run(_task(worktree))
    assert (result.status, result.turns, len(server.requests)) == ("finished", 1, 2)
    assert [r["kind"] for r in _records(result.transcript_path)].count("retry") == retry_records


def test_base_url_and_model_come_from_the_environment(worktree, monkeypatch):
    with FakeMessagesServer([[text("done")]]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
        monkeypatch.setenv("BITWISE_AGENT_MODEL", "self-hosted-model")
        result = make_backend("anthropic").run(_task(worktree))
    assert result.status == "finished" and server.requests[0]["model"] == "self-hosted-model"
    assert "cache_control" not in server.requests[0]  # off by default for a non-Anthropic endpoint


def test_non_retryable_api_error_ends_the_run_with_error(worktree):
    with FakeMessagesServer([{"status": 400, "message": "bad tool schema"}]) as server:
        result = _backend(server).run(_task(worktree))
    assert result.status == "error" and "bad tool schema" in result.final_text


def test_missing_api_key_names_what_to_set(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ValueError, match=r"set ANTHROPIC_API_KEY \(or pass --agent none\)"):
        make_backend("anthropic")


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
    result = backend.run(_task(worktree, AgentLimits(max_wall_s=0.5, command_timeout_s=60)))
    assert result.status == "limit:time" and result.turns == 3 and time.monotonic() - started < 5
    assert "time limit" in result.final_text


def test_claude_code_options(worktree, tmp_path, monkeypatch):
    import claude_agent_sdk  # noqa: F401  (the test extra installs it: this test must run, not skip)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    cli = _fake_cli(tmp_path)
    run_gates = Tool("run_gates", "Run the gates.", {"type": "object", "properties": {}}, lambda _: "ok")
    limits = AgentLimits(max_turns=7, max_cost_usd=3.0, command_timeout_s=120)
    options = make_backend("claude-code", cli_path=str(cli), model="claude-sonnet-5").options(
        _task(worktree, limits, {"run_gates": run_gates}))
    assert options.cwd == str(worktree) and options.cli_path == str(cli) and options.model == "claude-sonnet-5"
    assert options.setting_sources == ["project"] and options.skills == "all"
    assert (options.max_turns, options.max_budget_usd, options.permission_mode) == (7, 3.0, "dontAsk")
    assert {"mcp__harness__run_gates", "mcp__harness__run_command", "mcp__harness__write_file",
            "mcp__harness__edit_file"} <= set(options.allowed_tools)
    unconfined = {"Bash", "Edit", "Write", "WebFetch"}  # they would run outside the sandbox
    assert not unconfined & (set(options.tools) | set(options.allowed_tools)) and unconfined <= set(
        options.disallowed_tools)
    assert list(options.mcp_servers) == ["harness"]


def test_none_backend_and_unknown_names(worktree):
    result = make_backend("none", model="ignored").run(_task(worktree))
    assert result.status == "finished" and "no edit was made" in result.final_text
    assert result.transcript_path.is_file()
    with pytest.raises(ValueError, match="anthropic, claude-code, none"):
        make_backend("codex")


@pytest.mark.parametrize("field, value", [("max_turns", 0), ("max_cost_usd", -1.0), ("max_total_tokens", 1.5),
                                          ("command_timeout_s", "60"), ("max_wall_s", 0),
                                          ("request_timeout_s", -5.0)])
def test_limits_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        AgentLimits(**{field: value})


def test_a_command_leaves_no_process_behind_and_reaches_no_network(worktree):
    """A setsid daemon (it left the process group, so a group kill misses it) dies with the
    command's PID namespace; a loopback server the test holds open is unreachable from it."""
    import socket

    from gates import confine
    assert confine.unavailable() is None, f"agents' commands must run sandboxed here: {confine.unavailable()}"
    tools = worktree_tools(worktree, command_timeout_s=30)
    marker = worktree / "daemon-was-alive"
    out = tools["run_command"].handler({"command": f"(setsid sh -c 'sleep 1; touch {marker}' &); echo started"})
    assert out == "exit code: 0\nstarted\n"
    time.sleep(2.5)
    assert not marker.exists(), "a daemon started by an agent's command outlived it"
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        probe = f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\""
        out = tools["run_command"].handler({"command": probe})
    assert not out.startswith("exit code: 0") and "Network is unreachable" in out, out


def test_a_command_writes_only_its_worktree_git_and_scratch(tmp_path):
    """Outside the agent's clone (its own git directory with it) and the command's own TMPDIR
    nothing can be written (a sibling worktree, /tmp, the virtual environment, the harness's
    git directory, whose config git would run), not even after
    remounting a mount writable (root of its namespace, it may try), a hard link to a file
    elsewhere is refused, and the agent can still commit."""
    import git

    from gates import confine
    assert confine.unavailable() is None, f"agents' commands must run confined here: {confine.unavailable()}"
    repo = git.Repo.init(tmp_path / "repo")
    (tmp_path / "repo" / "a.py").write_text("A = 1\n")
    repo.index.add(["a.py"])
    repo.index.commit("one")
    from harness.workspace import agent_clone, open_repo
    root = agent_clone(open_repo(tmp_path / "repo"), "agent", tmp_path / "wt", "HEAD")
    other = tmp_path / "other-worktree"
    other.mkdir()
    (other / "kernel.py").write_text("SAFE = True\n")
    run = worktree_tools(root, command_timeout_s=60)["run_command"].handler
    venv_site = Path(sys.prefix) / f"cheat-{os.getpid()}.pth"
    for command in (f"echo cheat > {other}/kernel.py", f"touch {venv_site}", "touch /tmp/left-behind",
                    f"ln {other}/kernel.py linked.py", f"git config -f {repo.git_dir}/config core.fsmonitor true",
                    f"mount -o remount,bind,rw / ; mount -o remount,bind,rw {other} ; echo cheat > {other}/kernel.py"):
        out = run({"command": command})
        assert not out.startswith("exit code: 0"), (command, out)
        assert "Read-only file system" in out or "cross-device" in out, (command, out)
    assert (other / "kernel.py").read_text() == "SAFE = True\n" and not venv_site.exists()
    out = run({"command": "echo t > $TMPDIR/t && cat $TMPDIR/t && echo B = 2 > b.py && git add b.py"
                          " && git -c user.name=a -c user.email=a@b commit -qm two && git log --format=%s -1"})
    assert out == "exit code: 0\nt\ntwo\n", out
    assert git.Repo(root).commit("agent").message.strip() == "two" and "fsmonitor" not in (
        Path(repo.git_dir) / "config").read_text()
