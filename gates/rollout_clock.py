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
    engine step, empty unless `per_step`). A stepped rollout is the same work as `generate`:
    requests added at once, arrival steps honoured by the engine, steps until none is left."""
    requests = list(requests)
    steps = []
    sync()
    started, cpu_started = time.perf_counter(), time.process_time()
    if per_step:
        for request in requests:
            engine.add_request(request)
        done = {}
        while engine.has_work():
            before, step_started = dict(engine.step_phases), time.perf_counter()
            for completion in engine.step():
                done[completion.request.request_id] = completion
            phases = [name for name, count in engine.step_phases.items() if count != before.get(name, 0)]
            steps.append(("+".join(phases[0]) if phases else "idle", time.perf_counter() - step_started))
        completions = [done[request.request_id] for request in requests]
    else:
        completions = engine.generate(requests)
    sync()
    return completions, time.perf_counter() - started, time.process_time() - cpu_started, steps
