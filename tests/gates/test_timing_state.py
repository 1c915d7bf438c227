"""What a timed C10 worker records about its host: steal ticks and the clocks of its held cores."""
import os

from gates.timing_state import host_state, machine_state


def test_host_state_reads_steal_and_the_held_cores_clocks():
    state = host_state()
    assert isinstance(state["steal_ticks"], int) and state["steal_ticks"] >= 0, state
    held = {str(core) for core in os.sched_getaffinity(0)}
    assert state["core_mhz"] and set(state["core_mhz"]) <= held, (state, held)
    assert all(mhz > 0 for mhz in state["core_mhz"].values()), state


def test_host_state_follows_the_cores_the_process_is_held_to():
    cores = sorted(os.sched_getaffinity(0))
    try:
        os.sched_setaffinity(0, cores[-1:])
        assert set(host_state()["core_mhz"]) == {str(cores[-1])}
    finally:
        os.sched_setaffinity(0, cores)


def test_machine_state_says_none_for_a_gpu_it_cannot_ask(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi
    state = machine_state()
    assert state["sm_mhz"] is None and state["power_w"] is None, state
    assert isinstance(state["cpu"], int) and state["cpu"] >= 0, state
    assert "steal_ticks" in state and "core_mhz" in state
