"""The `claude-code` backend: the Claude Agent SDK runs Claude Code with the worktree as cwd and its
.claude/ settings and skills (setting_sources=["project"]: not the user's own).
Claude Code's own Bash, Edit and Write are withheld (they would run unconfined in the harness's
process tree): commands and writes go through the anthropic backend's worktree tools
(harness/agents/worktree_tools.py) with the role's extra tools, served in-process as MCP server
"harness"; only reading built-ins are kept. All is pre-approved (permission_mode "dontAsk"); the
SDK caps turns and cost, max_wall_s cancels the query, tokens are counted here. Needs credentials
(checked when the backend is made) and the SDK (it bundles a `claude` CLI) or a `claude` on PATH.
"""
import asyncio
import dataclasses
import os
import shutil
import time
import traceback
from contextlib import aclosing
from functools import partial
from pathlib import Path

from gates.switches import switch
from harness.agents.base import AgentResult, AgentTask, Tool, append_transcript
from harness.agents.worktree_tools import worktree_tools

BUILTIN_TOOLS = ["Read", "Glob", "Grep", "Skill"]  # reading only: commands and writes are confined tools
UNCONFINED_TOOLS = ["Bash", "BashOutput", "KillShell", "Edit", "MultiEdit", "Write", "NotebookEdit", "WebFetch",
                    "WebSearch", "Task"]
MCP_SERVER = "harness"
INSTALL_SDK = "pip install claude-agent-sdk (or pip install -e '.[agents]'), or pass --agent none"
INSTALL_CLI = ("install Claude Code (npm install -g @anthropic-ai/claude-code) or pass cli_path=/path/to/claude, "
               "or pass --agent none")
CREDENTIAL_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
                        "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX")
RESULT_STATUS = {"success": "finished", "error_max_turns": "limit:turns", "error_max_budget_usd": "limit:cost"}


def _import_sdk():
    try:
        import claude_agent_sdk
    except ImportError:
        raise ValueError(f"the claude-code backend needs the Claude Agent SDK: {INSTALL_SDK}") from None
    return claude_agent_sdk


def _bundled_cli(sdk) -> Path | None:
    """The CLI the SDK wheel ships beside itself, which the SDK prefers to one on PATH."""
    path = Path(sdk.__file__).parent / "_bundled" / "claude"
    return path if path.is_file() else None


def find_cli(sdk, cli_path: str | None) -> str:
    if cli_path:
        if not Path(cli_path).is_file():
            raise ValueError(f"Claude Code CLI not found at cli_path={cli_path!r}: {INSTALL_CLI}")
        return str(cli_path)
    found = _bundled_cli(sdk) or shutil.which("claude")
    if not found:
        raise ValueError(f"Claude Code CLI `claude` not found (not bundled with the SDK, not on PATH): {INSTALL_CLI}")
    return str(found)


def require_credentials() -> None:
    """ValueError unless Claude Code has a way to authenticate: an API key or token in the
    environment, a cloud provider switched on, or the credentials file `claude` logs in to
    (under CLAUDE_CONFIG_DIR, default ~/.claude). Checked before a run makes any worktree."""
    if any(os.environ.get(name) for name in CREDENTIAL_VARIABLES):
        return
    config = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")
    if (config / ".credentials.json").is_file():
        return
    raise ValueError(f"the claude-code backend found no credentials: set ANTHROPIC_API_KEY or "
                     f"CLAUDE_CODE_OAUTH_TOKEN, or log in with `claude` ({config}/.credentials.json), "
                     "or pass --agent none")


def _mcp_tool(sdk, tool: Tool):
    """Wrap a harness Tool for the SDK's in-process MCP server; the handler runs in a thread
    because gate runs block for minutes and the SDK's event loop must keep streaming."""
    async def call(args: dict) -> dict:
        try:
            text = str(await asyncio.to_thread(tool.handler, dict(args)))
        except Exception as err:
            text = f"error: {type(err).__name__}: {err}"
        return {"content": [{"type": "text", "text": text}], "is_error": text.startswith("error:")}
    return sdk.tool(tool.name, tool.description, dict(tool.input_schema))(call)


def _as_record(message) -> dict:
    body = dataclasses.asdict(message) if dataclasses.is_dataclass(message) else {"repr": repr(message)}
    return {"type": type(message).__name__, **body}


class ClaudeCodeBackend:
    def __init__(self, *, model: str | None = None, cli_path: str | None = None):
        self._sdk = _import_sdk()
        self.cli_path = find_cli(self._sdk, cli_path)
        require_credentials()
        self.model = model or switch("BITWISE_AGENT_MODEL") or None  # None: the CLI's default

    def options(self, task: AgentTask):
        sdk, limits, started = self._sdk, task.limits, time.monotonic()
        tools = {**worktree_tools(task.worktree, limits.command_timeout_s,
                                  lambda: limits.max_wall_s - (time.monotonic() - started)), **task.extra_tools}
        server = sdk.create_sdk_mcp_server(MCP_SERVER, tools=[_mcp_tool(sdk, tool) for tool in tools.values()])
        return sdk.ClaudeAgentOptions(
            cwd=str(task.worktree), cli_path=self.cli_path, model=task.model or self.model,
            system_prompt={"type": "preset", "preset": "claude_code"},
            setting_sources=["project"], skills="all", tools=list(BUILTIN_TOOLS),
            allowed_tools=BUILTIN_TOOLS + [f"mcp__{MCP_SERVER}__{name}" for name in tools],
            disallowed_tools=list(UNCONFINED_TOOLS), permission_mode="dontAsk",
            mcp_servers={MCP_SERVER: server}, max_turns=limits.max_turns, max_budget_usd=limits.max_cost_usd,
        )

    def run(self, task: AgentTask) -> AgentResult:
        log = partial(append_transcript, task.transcript_path)
        log("start", backend="claude-code", role=task.role, model=task.model or self.model,
            worktree=str(task.worktree), cli_path=self.cli_path)
        tally = {"status": "error", "turns": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0,
                 "final_text": ""}
        try:
            asyncio.run(asyncio.wait_for(self._stream(task, tally, log), timeout=task.limits.max_wall_s))
        except TimeoutError:  # the agent's wall-clock budget: cancelling the query stops the CLI
            tally["status"] = "limit:time"
            tally["final_text"] = f"stopped at the time limit ({task.limits.max_wall_s:.0f} s)\n{tally['final_text']}"
        except Exception as err:  # CLI crash, auth failure: end this agent, keep the other
            tally["status"], tally["final_text"] = "error", f"{type(err).__name__}: {err}"
            log("error", error=tally["final_text"], traceback=traceback.format_exc())
        result = AgentResult(transcript_path=task.transcript_path, **tally)
        log("end", **dataclasses.asdict(result))
        return result

    async def _stream(self, task: AgentTask, tally: dict, log) -> None:
        sdk, seen = self._sdk, set()
        async with aclosing(sdk.query(prompt=task.instructions, options=self.options(task))) as messages:
            async for message in messages:
                log("message", message=_as_record(message))
                if isinstance(message, sdk.ResultMessage):
                    tally["status"] = RESULT_STATUS.get(message.subtype, "error")
                    tally["turns"] = message.num_turns
                    tally["cost_usd"] = message.total_cost_usd or 0.0
                    tally["final_text"] = message.result or tally["final_text"]
                elif isinstance(message, sdk.AssistantMessage):
                    _count(sdk, message, tally, seen)
                    if tally["input_tokens"] + tally["output_tokens"] >= task.limits.max_total_tokens:
                        tally["status"] = "limit:tokens"
                        return  # closing the query stops the CLI


def _count(sdk, message, tally: dict, seen: set) -> None:
    """Add one assistant message's usage; the CLI streams one message per content block, all
    carrying the usage of their API response, so each message_id is counted once."""
    texts = [block.text for block in message.content if isinstance(block, sdk.TextBlock)]
    tally["final_text"] = "\n".join(texts) or tally["final_text"]
    if message.message_id in seen and message.message_id is not None:
        return
    seen.add(message.message_id)
    usage = message.usage or {}
    tally["turns"] += 1
    tally["input_tokens"] += sum(usage.get(key) or 0 for key in (
        "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    tally["output_tokens"] += usage.get("output_tokens") or 0
