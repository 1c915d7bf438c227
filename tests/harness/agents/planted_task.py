"""The task the agent backends' tests give an agent: fix the fault planted in the `worktree`
fixture (conftest.py), which the repro script REPRO shows; the transcript goes beside the worktree."""
from harness.agents.base import AgentLimits, AgentTask

REPRO = ("import sys\nsys.path.insert(0, '.')\nfrom kernels.op import SCALE\nassert SCALE == 1.0, SCALE\n"
         "print('repro passes')\n")


def agent_task(worktree, limits=None, extra_tools=None):
    return AgentTask(role="consistent", worktree=worktree, instructions="Fix the repro.",
                     limits=limits or AgentLimits(command_timeout_s=60), extra_tools=extra_tools or {},
                     transcript_path=worktree.parent / "transcripts" / "consistent.jsonl")
