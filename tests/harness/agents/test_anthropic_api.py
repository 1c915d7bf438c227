"""The `anthropic` agent backend: the real `anthropic` client against a scripted fake Messages
server on loopback (tests/fake_messages_server.py) reads, edits, runs commands and finishes;
paths outside the worktree are refused; the loop stops at its turn, cost, token and wall-clock
limits; overloads and server errors are retried; the endpoint and model may come from the
environment, and a missing API key is named. The fixtures: conftest.py."""
import json
import sys
import time

import pytest

from harness.agents import make_backend
from harness.agents.base import AgentLimits, Tool
from tests.fake_messages_server import FakeMessagesServer, overloaded, text, tool_results, tool_use
from tests.harness.agents.planted_task import REPRO, agent_task


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
            agent_task(worktree, extra_tools={"run_gates": run_gates}))
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
        result = _backend(server).run(agent_task(worktree))
    assert result.status == "finished"
    results = tool_results(server.requests[1])
    assert len(results) == len(attempts)
    for block, attempt in zip(results, attempts):
        assert block["is_error"] and "outside the worktree" in block["content"], (attempt, block)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret"


@pytest.mark.parametrize("limits, usage, status, num_requests", [
    (AgentLimits(max_turns=2), None, "limit:turns", 2),
    (AgentLimits(max_cost_usd=0.01), {"input_tokens": 1000, "output_tokens": 100}, "limit:cost", 2),
    (AgentLimits(max_total_tokens=3000), {"input_tokens": 1000, "output_tokens": 100}, "limit:tokens", 3),
])
def test_limits_stop_the_loop(worktree, limits, usage, status, num_requests):
    script = [[tool_use("list_dir")]] * 10
    with FakeMessagesServer(script, usage=usage) as server:
        # claude-opus-5-5 costs $4 / $20 per MTok: $0.006 a turn here, so $0.01 is hit after 2.
        result = _backend(server, model="claude-opus-5-5").run(agent_task(worktree, limits))
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
        result = _backend(server).run(agent_task(worktree, limits))
        elapsed = time.monotonic() - started
    assert result.status == "limit:time" and result.turns == 1, (result.status, result.final_text)
    assert "time limit" in result.final_text and elapsed < 4.0, elapsed
    assert len(server.requests) >= 2  # the hanging call was retried inside the budget
    assert _records(result.transcript_path)[-1]["status"] == "limit:time"


def test_a_command_is_cut_to_the_wall_clock_budget_left(worktree):
    script = [[tool_use("run_command", command="sleep 20", timeout_s=600)], [text("never sent")]]
    started = time.monotonic()
    with FakeMessagesServer(script) as server:
        result = _backend(server).run(agent_task(worktree, AgentLimits(max_wall_s=1.5, command_timeout_s=900)))
    assert result.status == "limit:time" and time.monotonic() - started < 6 and len(server.requests) == 1
    killed = [r for r in _records(result.transcript_path) if r["kind"] == "tool_result"][0]["content"]
    assert killed.startswith("error: timed out after 1"), killed


def test_the_wall_clock_budget_stops_a_slow_loop_between_turns(worktree):
    script = [_late(0.3, [tool_use("list_dir")])] * 20
    with FakeMessagesServer(script) as server:
        result = _backend(server).run(agent_task(worktree, AgentLimits(max_wall_s=1.0, command_timeout_s=60)))
    assert result.status == "limit:time" and 2 <= result.turns <= 5 and len(server.requests) < 20


@pytest.mark.parametrize("failure, settings, retry_records", [
    (overloaded(), {"max_retries": 0}, 1),                       # our backoff retries the 529
    (overloaded(retry_after_ms=10), {"max_retries": 2}, 0),     # the client's own retry does
    ({"status": 500}, {"max_retries": 0}, 1),
])
def test_overload_is_retried_and_the_run_finishes(worktree, failure, settings, retry_records):
    with FakeMessagesServer([failure, [text("done")]]) as server:
        backend = make_backend("anthropic", api_key="k", base_url=server.base_url, backoff_s=0.01, **settings)
        result = backend.run(agent_task(worktree))
    assert (result.status, result.turns, len(server.requests)) == ("finished", 1, 2)
    assert [r["kind"] for r in _records(result.transcript_path)].count("retry") == retry_records


def test_base_url_and_model_come_from_the_environment(worktree, monkeypatch):
    with FakeMessagesServer([[text("done")]]) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "from-env")
        monkeypatch.setenv("BITWISE_AGENT_MODEL", "self-hosted-model")
        result = make_backend("anthropic").run(agent_task(worktree))
    assert result.status == "finished" and server.requests[0]["model"] == "self-hosted-model"
    assert "cache_control" not in server.requests[0]  # off by default for a non-Anthropic endpoint


def test_non_retryable_api_error_ends_the_run_with_error(worktree):
    with FakeMessagesServer([{"status": 400, "message": "bad tool schema"}]) as server:
        result = _backend(server).run(agent_task(worktree))
    assert result.status == "error" and "bad tool schema" in result.final_text


def test_missing_api_key_names_what_to_set(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ValueError, match=r"set ANTHROPIC_API_KEY \(or pass --agent none\)"):
        make_backend("anthropic")
