"""Agent backends: `make_backend(name, **settings).run(task)` drives one agent in its worktree.

Backends are `anthropic` (our Messages API tool loop), `claude-code` (the Claude Agent SDK)
and `none`; the interface is in base.py. Nothing here is imported until a backend is made, so
the `anthropic` and `claude_agent_sdk` packages are needed only by the backend that uses them.
"""
