"""Run a callable under torch's profiler and keep what a RESULTS table needs: wall time, the
GPU time of its kernels, the host ops and the kernels that took longest, per repetition. The
rollout benchmark profiles engine steps with it, the trainer benchmark one GRPO step."""
import time

import torch


def profiled(work, sync, limit: int = 10, repeats: int = 1) -> dict:
    """`work()` run `repeats` times in a row under the profiler (CUDA activity where there is a
    device); times and counts are per repetition."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        sync()
        started = time.perf_counter()
        for _ in range(repeats):
            work()
        sync()
        wall = time.perf_counter() - started
    events = prof.key_averages()
    gpu_us = sum(e.self_device_time_total for e in events)
    host = sorted(((e.key, e.self_cpu_time_total, e.count) for e in events), key=lambda r: -r[1])[:limit]
    kernels = sorted(((e.key, e.self_device_time_total, e.count) for e in events if e.self_device_time_total > 0),
                     key=lambda r: -r[1])[:limit]
    return {"steps": repeats, "wall_ms": 1e3 * wall / repeats, "gpu_kernel_ms": gpu_us / 1e3 / repeats,
            "host_self_us": [{"op": k[:80], "us": round(t / repeats, 1), "calls": n / repeats} for k, t, n in host],
            "kernels_us": [{"kernel": k[:80], "us": round(t / repeats, 1), "calls": n / repeats}
                           for k, t, n in kernels]}
