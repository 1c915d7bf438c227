"""Agent backends: `make_backend(name, **settings).run(task)` drives one agent in its worktree.

Backends are `anthropic` (our Messages API tool loop), `claude-code` (the Claude Agent SDK)
and `none`; the interface is in base.py. Nothing here is imported until a backend is made, so
the `anthropic` and `claude_agent_sdk` packages are needed only by the backend that uses them.
"""
from harness.agents.base import AgentBackend

BACKENDS = ("anthropic", "claude-code", "none")


def make_backend(name: str, **settings) -> AgentBackend:
    """The backend called `name`; settings go to its constructor, which checks credentials and
    SDKs up front (ValueError naming what to set) so a run fails before making worktrees."""
    if name == "anthropic":
        from harness.agents.anthropic_api import AnthropicBackend
        return AnthropicBackend(**settings)
    if name == "claude-code":
        from harness.agents.claude_code import ClaudeCodeBackend
        return ClaudeCodeBackend(**settings)
    if name == "none":
        from harness.agents.none import NoneBackend
        return NoneBackend(**settings)
    raise ValueError(f"unknown agent backend {name!r}; choose one of: {', '.join(BACKENDS)}")
