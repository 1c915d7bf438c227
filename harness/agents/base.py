"""The agent interface: what the orchestrator hands a backend (AgentTask) and gets back
(AgentResult), the tools it may add (Tool); it imports no backend (harness/agents/__init__.py
makes them by name).

Status strings are shared by every backend: "finished", "limit:turns", "limit:tokens",
"limit:cost", "limit:time" (the agent's wall-clock budget), "error". Transcripts are JSONL,
one record per event, appended and flushed as the event happens (`append_transcript`), so a
killed run still leaves its record.
"""
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from harness.secrets import redact

STATUSES = ("finished", "limit:turns", "limit:tokens", "limit:cost", "limit:time", "error")


@dataclass(frozen=True, slots=True)
class AgentLimits:
    max_turns: int = 150
    """Model responses (requests sent) before the run stops with "limit:turns"."""
    max_total_tokens: int = 10_000_000
    """Input + output tokens summed over every response (each request re-sends the history)."""
    max_cost_usd: float = 25.0
    """Spend, priced per model (anthropic_api.PRICES_USD_PER_MTOK), before "limit:cost"."""
    command_timeout_s: float = 900.0
    """Upper bound on one run_command; a longer timeout asked by the model is cut to this."""
    max_wall_s: float = 4 * 3600.0
    """Wall-clock budget of the whole agent, retries and waits included, before "limit:time"."""
    request_timeout_s: float = 600.0
    """Upper bound on one model call (a hanging endpoint), cut to what max_wall_s leaves."""

    def __post_init__(self):
        for name in ("max_turns", "max_total_tokens", "max_cost_usd", "command_timeout_s", "max_wall_s",
                     "request_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"AgentLimits.{name} must be a positive number, got {value!r}")
        for name in ("max_turns", "max_total_tokens"):
            if not isinstance(getattr(self, name), int):
                raise ValueError(f"AgentLimits.{name} must be an integer, got {getattr(self, name)!r}")


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    """What the model calls it: letters, digits, '_' and '-'."""
    description: str
    """Shown to the model: what the tool does and when to use it."""
    input_schema: Mapping[str, Any]
    """JSON schema of the input object."""
    handler: Callable[[dict], str]
    """Runs the tool; returns the text the model sees. Errors: return "error: ..." (an
    exception is caught by the backend and shown to the model as an error result)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentTask:
    role: str
    """Which agent this is, e.g. "baseline" or "consistent"; recorded in the transcript."""
    worktree: Path
    """The agent's own clone: the cwd of its commands and the root its file tools confine to."""
    instructions: str
    """The task text; the system prompt of the anthropic backend, the prompt of claude-code."""
    model: str = ""
    """The agent's model; "" takes the backend's (settings, BITWISE_AGENT_MODEL, default)."""
    limits: AgentLimits = field(default_factory=AgentLimits)
    """Turn, token, cost and command-time budgets of this one agent."""
    transcript_path: Path
    """JSONL file the backend appends every request, response, tool call and result to."""
    extra_tools: Mapping[str, Tool] = field(default_factory=dict)
    """Harness tools added to the worktree tools (run_gates, locate, shrink, profile)."""

    def __post_init__(self):
        if not self.role:
            raise ValueError("AgentTask.role must be non-empty")
        if not Path(self.worktree).is_dir():
            raise ValueError(f"AgentTask.worktree is not a directory: {self.worktree}")
        for name, tool in self.extra_tools.items():
            if name != tool.name:
                raise ValueError(f"AgentTask.extra_tools key {name!r} differs from its Tool.name {tool.name!r}")


@dataclass(frozen=True, slots=True)
class AgentResult:
    status: str
    """One of STATUSES."""
    turns: int
    """Model responses received."""
    input_tokens: int
    """Input tokens summed over responses, cache reads and writes included."""
    output_tokens: int
    cost_usd: float
    transcript_path: Path
    final_text: str
    """The agent's last text, or what stopped it (the limit, the error)."""


class AgentBackend(Protocol):
    def run(self, task: AgentTask) -> AgentResult: ...


def append_transcript(path: Path, kind: str, **fields) -> None:
    """Append one event; opened and closed per event so nothing sits in a buffer when killed."""
    record = {"time": round(time.time(), 3), "kind": kind, **fields}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(redact(json.dumps(record, default=str)) + "\n")  # no secret reaches the file
