"""The `none` backend: no agent runs and nothing is edited. What `harness run` uses without
credentials: the pipeline still runs every gate, locates and shrinks what fails, and the
report tells the person what to fix."""
from harness.agents.base import AgentResult, AgentTask, append_transcript

NO_AGENT = "no agent ran (--agent none), so no edit was made; fix what the report names by hand"


class NoneBackend:
    def __init__(self, **settings):
        """Accepts and ignores the settings other backends take, so callers can pass them alike."""

    def run(self, task: AgentTask) -> AgentResult:
        result = AgentResult(status="finished", turns=0, input_tokens=0, output_tokens=0, cost_usd=0.0,
                             transcript_path=task.transcript_path, final_text=NO_AGENT)
        append_transcript(task.transcript_path, "end", backend="none", role=task.role, status=result.status,
                          final_text=result.final_text)
        return result
