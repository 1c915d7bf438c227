"""What the agent backends share: make_backend names the backends it knows (the `none`
backend finishes without an edit), and AgentLimits refuses a bad value naming the field.
The fixtures: conftest.py."""
import pytest

from harness.agents import make_backend
from harness.agents.base import AgentLimits
from tests.harness.agents.planted_task import agent_task


def test_none_backend_and_unknown_names(worktree):
    result = make_backend("none", model="ignored").run(agent_task(worktree))
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
