"""The `anthropic` backend: our own Messages API tool loop (non-streaming, one request a turn) with
the real `anthropic` client; it runs every tool_use and answers with tool_results until the model
ends its turn without one or a limit is hit. Base URL: setting or ANTHROPIC_BASE_URL (any
Anthropic-compatible endpoint); model: task, setting, BITWISE_AGENT_MODEL, DEFAULT_MODEL.
Overload/5xx/429/timeouts: the client's retries, then our bounded backoff, all inside max_wall_s
(each call at most request_timeout_s). Transcript: each request (new messages only), raw
response, tool call and result, as it happens. An unpriced model costs as the dearest priced one,
so its budget stops early (set price_usd_per_mtok, e.g. (0, 0)).
"""
import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from functools import partial

from gates.switches import switch
from harness.agents.base import AgentLimits, AgentResult, AgentTask, Tool, append_transcript
from harness.agents.worktree_tools import worktree_tools

DEFAULT_MODEL = "claude-opus-5-5"
# USD per million (input, output) tokens; matched by longest prefix so dated ids match too.
PRICES_USD_PER_MTOK = {
    "claude-fable-5-1": (10.0, 50.0),
    "claude-opus-5-5": (4.0, 20.0),
    "claude-sonnet-5-5": (2.0, 10.0),
    "claude-opus-5": (5.0, 25.0),
    "claude-sonnet-5": (2.0, 10.0),
    "claude-opus-4-7": (5.0, 25.0),
    "claude-sonnet-4-6": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
}
UNKNOWN_MODEL_PRICE = max(PRICES_USD_PER_MTOK.values())
CACHE_WRITE_FACTOR, CACHE_READ_FACTOR = 1.25, 0.1  # prompt-cache tokens, relative to input
KICKOFF = "Start the task now. When it is done, reply with a short summary and no tool call."
CONTINUE = "Your reply was cut at max_tokens. Continue."


def price_of(model: str, override: tuple[float, float] | None = None) -> tuple[float, float]:
    if override is not None:
        return tuple(override)
    matches = [name for name in PRICES_USD_PER_MTOK if model.startswith(name)]
    return PRICES_USD_PER_MTOK[max(matches, key=len)] if matches else UNKNOWN_MODEL_PRICE


@dataclass
class _Progress:
    price: tuple[float, float]
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    final_text: str = ""
    started: float = field(default_factory=time.monotonic)

    def seconds_left(self, limits: AgentLimits) -> float:
        return limits.max_wall_s - (time.monotonic() - self.started)

    def record(self, response) -> None:
        usage = response.usage
        written, read = usage.cache_creation_input_tokens or 0, usage.cache_read_input_tokens or 0
        self.turns += 1
        self.input_tokens += usage.input_tokens + written + read
        self.output_tokens += usage.output_tokens
        billed_input = usage.input_tokens + CACHE_WRITE_FACTOR * written + CACHE_READ_FACTOR * read
        self.cost_usd += (billed_input * self.price[0] + usage.output_tokens * self.price[1]) / 1e6
        texts = [block.text for block in response.content if block.type == "text"]
        self.final_text = "\n".join(texts) or self.final_text

    def limit_hit(self, limits: AgentLimits) -> str | None:
        if self.turns >= limits.max_turns:
            return "turns"
        if self.input_tokens + self.output_tokens >= limits.max_total_tokens:
            return "tokens"
        if self.cost_usd >= limits.max_cost_usd:
            return "cost"
        if self.seconds_left(limits) <= 0:
            return "time"
        return None


class _OutOfTime(Exception):
    """The agent's wall-clock budget ran out inside a model call or its retries."""


def _call_tool(tools: dict[str, Tool], block: dict, truncated: bool, log) -> dict:
    """Run one tool_use block; any failure becomes an is_error tool_result for the model."""
    log("tool_call", id=block["id"], name=block["name"], input=block["input"])
    tool = tools.get(block["name"])
    if truncated:  # the input may be cut off mid-way: running it could write half a file
        text = "error: your reply was cut at max_tokens, so this call was not run; send smaller calls"
    elif tool is None:
        text = f"error: no tool named {block['name']!r}; tools: {', '.join(tools)}"
    else:
        try:
            text = str(tool.handler(dict(block["input"])))
        except Exception as err:  # a tool bug is the model's error result, not the run's end
            text = f"error: {type(err).__name__}: {err}"
    is_error = text.startswith("error:")
    log("tool_result", id=block["id"], name=block["name"], is_error=is_error, content=text)
    return {"type": "tool_result", "tool_use_id": block["id"], "content": text, "is_error": is_error}


class AnthropicBackend:
    def __init__(self, *, api_key: str | None = None, base_url: str | None = None, model: str | None = None,
                 max_tokens: int = 16_000, max_retries: int = 4, overload_retries: int = 4,
                 backoff_s: float = 5.0, max_backoff_s: float = 120.0, prompt_cache: bool | None = None,
                 price_usd_per_mtok: tuple[float, float] | None = None):
        api_key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not api_key:
            raise ValueError("set ANTHROPIC_API_KEY (or pass --agent none)")
        try:
            import anthropic
        except ImportError:
            raise ValueError("the anthropic backend needs the `anthropic` package: "
                             "pip install anthropic (or pass --agent none)") from None
        self._anthropic = anthropic
        self.client = anthropic.Anthropic(api_key=api_key, max_retries=max_retries,
                                          base_url=base_url or os.environ.get("ANTHROPIC_BASE_URL") or None)
        self.model = model or switch("BITWISE_AGENT_MODEL") or DEFAULT_MODEL
        # Above ~21k max_tokens the client refuses non-streaming requests as possibly too long.
        self.max_tokens, self.price_usd_per_mtok = max_tokens, price_usd_per_mtok
        # Default: cache only against Anthropic's API; other endpoints may reject the field.
        self.prompt_cache = self.client.base_url.host == "api.anthropic.com" if prompt_cache is None else prompt_cache
        self.overload_retries, self.backoff_s, self.max_backoff_s = overload_retries, backoff_s, max_backoff_s

    def run(self, task: AgentTask) -> AgentResult:
        model = task.model or self.model
        progress = _Progress(price=price_of(model, self.price_usd_per_mtok))
        tools = {**worktree_tools(task.worktree, task.limits.command_timeout_s,
                                  lambda: progress.seconds_left(task.limits)), **task.extra_tools}
        log = partial(append_transcript, task.transcript_path)
        log("start", backend="anthropic", role=task.role, model=model, base_url=str(self.client.base_url),
            worktree=str(task.worktree), limits=asdict(task.limits))
        try:
            status = self._loop(task, self._params(task, model, tools), tools, progress, log)
        except Exception as err:  # API error after retries, or a bug: end this agent, keep the other
            status, progress.final_text = "error", f"{type(err).__name__}: {err}"
            log("error", error=progress.final_text, traceback=traceback.format_exc())
        result = AgentResult(status, progress.turns, progress.input_tokens, progress.output_tokens,
                             progress.cost_usd, task.transcript_path, progress.final_text)
        log("end", **asdict(result))
        return result

    def _params(self, task: AgentTask, model: str, tools: dict[str, Tool]) -> dict:
        params = {"model": model, "max_tokens": self.max_tokens, "system": task.instructions,
                  "tools": [{"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)}
                            for t in tools.values()]}
        if self.prompt_cache:  # caches the growing prefix: each turn re-sends the whole history
            params["cache_control"] = {"type": "ephemeral"}
        return params

    def _loop(self, task: AgentTask, params: dict, tools: dict[str, Tool], progress: _Progress, log) -> str:
        messages, sent = [{"role": "user", "content": KICKOFF}], 0
        log("request", turn=1, **params, new_messages=messages)
        while (hit := progress.limit_hit(task.limits)) is None:
            if sent:
                log("request", turn=progress.turns + 1, num_messages=len(messages), new_messages=messages[sent:])
            sent = len(messages)
            try:
                response = self._create(params, messages, log, lambda: progress.seconds_left(task.limits),
                                        task.limits.request_timeout_s)
            except _OutOfTime:
                break
            log("response", turn=progress.turns + 1, message=response.model_dump(mode="json"))
            progress.record(response)
            content = [block.model_dump(mode="json", exclude_none=True) for block in response.content]
            messages.append({"role": "assistant", "content": content})
            calls = [block for block in content if block["type"] == "tool_use"]
            truncated = response.stop_reason == "max_tokens"
            if calls:
                messages.append({"role": "user", "content": [_call_tool(tools, c, truncated, log) for c in calls]})
            elif truncated:
                messages.append({"role": "user", "content": CONTINUE})
            elif response.stop_reason in ("end_turn", "stop_sequence"):
                return "finished"
            else:
                progress.final_text = f"stopped: stop_reason {response.stop_reason!r}\n{progress.final_text}"
                return "error"
        hit = hit or "time"
        progress.final_text = f"stopped at the {hit} limit\n{progress.final_text}"
        return f"limit:{hit}"

    def _create(self, params: dict, messages: list, log, seconds_left, request_timeout_s: float):
        """messages.create; past the client's retries, back off on overload, 429, 5xx and
        timeouts. Each try's timeout is request_timeout_s, cut so that the client's own retries
        fit in what the agent's budget leaves; _OutOfTime when it is spent."""
        retryable = (self._anthropic.InternalServerError, self._anthropic.RateLimitError,
                     self._anthropic.APIConnectionError)  # APITimeoutError is a connection error
        for attempt in range(self.overload_retries + 1):
            left = seconds_left()
            if left <= 0:
                raise _OutOfTime
            try:
                return self.client.messages.create(**params, messages=messages, timeout=min(
                    request_timeout_s, left / (self.client.max_retries + 1)))
            except retryable as err:
                if seconds_left() <= 0:
                    raise _OutOfTime from err
                if attempt == self.overload_retries:
                    raise
                delay_s = min(self.backoff_s * 2 ** attempt, self.max_backoff_s)
                log("retry", attempt=attempt + 1, delay_s=delay_s, error=f"{type(err).__name__}: {err}")
                if delay_s >= seconds_left():
                    raise _OutOfTime from err
                time.sleep(delay_s)
