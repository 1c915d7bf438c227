"""The one clock for a rollout on a warm engine: wall time, this process's CPU time and, when
asked, each engine step's wall time with the phases it ran. `sync` waits for the device, so
the kernels a rollout queued are inside the interval. C10's timed worker records it beside
the judge's own clock (the judge times GO to DONE from outside and uses nothing the worker
says of itself); the profile stage and benchmarks/gpu_rollout.py report it. It imports
nothing, so the timed worker can inline it into a tree that predates it.
"""
import time


def timed_rollout(engine, requests, sync=lambda: None, per_step: bool = False) -> tuple:
    """(completions in request order, wall seconds, CPU seconds, [(phases, wall seconds)] per
    engine step, empty unless `per_step`): the same `generate`, its steps marked through its
    after_step hook."""
    steps = []
    sync()
    started, cpu_started = time.perf_counter(), time.process_time()
    if per_step:
        last = [dict(engine.step_phases), time.perf_counter()]

        def mark_step() -> None:
            before, step_started = last
            phases = [name for name, count in engine.step_phases.items() if count != before.get(name, 0)]
            last[:] = dict(engine.step_phases), time.perf_counter()
            steps.append(("+".join(phases[0]) if phases else "idle", last[1] - step_started))

        completions = engine.generate(requests, after_step=mark_step)
    else:
        completions = engine.generate(requests)
    sync()
    return completions, time.perf_counter() - started, time.process_time() - cpu_started, steps
