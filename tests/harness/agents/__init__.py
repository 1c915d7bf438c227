"""Tests of harness/agents: the agent backends and their worktree tools."""
