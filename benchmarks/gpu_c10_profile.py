"""Where C10's time goes on CUDA: C10's own workload, per kind of engine step and per region,
fast and consistent contract side by side.

    python3 benchmarks/gpu_c10_profile.py --out DIR [--models nemotron,qwen3] [--runs 2]

Per model and contract, one engine built as C10 builds it (gates/test_c10_performance.plan:
its config, workload, shape and engine options; seeded weights), warmed by one run of the
workload (compiles, graph captures; arrival steps counted from 0 again after it), then:
  1. `runs` timed runs, every step CUDA-synced and labelled by its kind (decode replayed in a
     graph, eager decode, prefill, mixed prefill + decode) and rows; wall time per kind;
  2. one profiled run (torch.profiler, CPU and CUDA; RegionDispatch.__call__ wrapped in
     record_function in this process only): per region and case its host time (inclusive)
     and the GPU time of the kernels launched directly inside it (region_times; a graph
     replay's kernels count outside regions), the top kernels, and GPU kernel time against
     the run's wall time;
  3. with --cprofile, one run under cProfile: the Python functions by own and inclusive time
     and the callers of the costliest (host syncs show as the builtins that wait: tolist,
     item, copies to the host), written as text beside the raw results.
The contracts alternate (fast, consistent, fast, ...) so drift hits both. Raw results, the
commit and the environment are written before the table is printed.
"""
import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.raw_output import provenance, write_raw  # noqa: E402
from gates import device  # noqa: E402
from gates.procedures import c10_subject  # noqa: E402
from gates.test_c10_performance import plan, subject_size  # noqa: E402
from gates.timed_worker import rollout_options  # noqa: E402
from gates.workload import Workload, make_engine, make_requests, seeded_weights  # noqa: E402
from kernels.contract import load_contract  # noqa: E402
from kernels.contract.dispatch import RegionDispatch  # noqa: E402
from kernels.models.config import load_model_config  # noqa: E402

CONTRACTS = ("fast", "consistent")
RANGE = "region/"


def graph_replays(engine) -> int:
    return sum(engine.graphs.replays.values()) if engine.graphs is not None else 0


def step_kind(engine, before_phases: dict, before_replays: int) -> str:
    phases = [k for k, n in engine.step_phases.items() if n != before_phases.get(k, 0)]
    if not phases:
        return "idle"
    if phases[0] == ("decode",):
        return "decode, graph" if graph_replays(engine) != before_replays else "decode, eager"
    return "+".join(phases[0])


def run_workload(engine, requests, sync, on_step=None) -> float:
    """Wall seconds of one run of the requests on the engine (arrivals from step 0)."""
    engine.step_count = 0
    for request in requests:
        engine.add_request(request)
    sync()
    started = time.perf_counter()
    while engine.has_work():
        before, replays = dict(engine.step_phases), graph_replays(engine)
        rows = len(engine.scheduler.running) + len(engine.scheduler.waiting)
        step_started = time.perf_counter()
        engine.step()
        sync()
        if on_step is not None:
            on_step(step_kind(engine, before, replays), rows, time.perf_counter() - step_started)
    return time.perf_counter() - started


def timed_run(engine, requests, sync) -> dict:
    """One run's wall time, every step as [kind, rows, seconds], and the seconds per kind."""
    steps = []
    wall = run_workload(engine, requests, sync, lambda kind, rows, s: steps.append([kind, rows, s]))
    by_kind = defaultdict(lambda: [0, 0.0])
    for kind, _, seconds in steps:
        by_kind[kind][0] += 1
        by_kind[kind][1] += seconds
    return {"wall_s": wall, "steps": steps, "by_kind": {k: {"steps": n, "s": s} for k, (n, s) in by_kind.items()}}


def region_times(events) -> dict:
    """From the profiler's raw events: per region range, its inclusive host ms and calls, and
    the GPU ms of the kernels launched directly inside it (each kernel charged to the innermost
    range around its launch, matched by correlation id; "(outside regions)" holds graph
    replays' kernels and the rest; "(unmatched)" kernels whose launch was not found)."""
    ranges, launches, kernels = defaultdict(list), {}, []
    for e in events:
        if e.device_type() == torch.autograd.DeviceType.CPU:
            if e.name().startswith(RANGE):
                ranges[e.start_thread_id()].append((e.start_ns(), e.start_ns() + e.duration_ns(),
                                                    e.name()[len(RANGE):]))
            else:
                launches[e.correlation_id()] = (e.start_thread_id(), e.start_ns())
        else:
            kernels.append((e.linked_correlation_id() or e.correlation_id(), e.duration_ns(), e.name()))
    table = defaultdict(lambda: {"calls": 0, "host_ms": 0.0, "gpu_ms": 0.0})
    for spans in ranges.values():
        for start, end, name in spans:
            table[name]["calls"] += 1
            table[name]["host_ms"] += (end - start) / 1e6
    by_thread = defaultdict(list)
    for correlation, duration, _ in kernels:
        if correlation in launches:
            thread, at = launches[correlation]
            by_thread[thread].append((at, duration))
        else:
            table["(unmatched)"]["gpu_ms"] += duration / 1e6
    for thread, charged in by_thread.items():
        spans, stack, i = sorted(ranges.get(thread, [])), [], 0
        for at, duration in sorted(charged):
            while i < len(spans) and spans[i][0] <= at:
                stack.append(spans[i])
                i += 1
            while stack and stack[-1][1] < at:
                stack.pop()
            while stack and not stack[-1][0] <= at <= stack[-1][1]:  # an outer range ended before an inner
                stack.pop()
            table[stack[-1][2] if stack else "(outside regions)"]["gpu_ms"] += duration / 1e6
    return dict(table)


def profiled_run(engine, requests, sync, limit=25) -> dict:
    door = RegionDispatch.__call__

    def traced(dispatch, region, case, layer, *args, **kwargs):
        with torch.profiler.record_function(f"{RANGE}{region}/{case}"):
            return door(dispatch, region, case, layer, *args, **kwargs)

    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    RegionDispatch.__call__ = traced
    try:
        with torch.profiler.profile(activities=activities) as prof:
            wall = run_workload(engine, requests, sync)
    finally:
        RegionDispatch.__call__ = door
    # the raw events: key_averages() builds a FunctionEvent tree, minutes for a nemotron rollout
    events = list(prof.profiler.kineto_results.events())
    kernels, host = defaultdict(lambda: [0.0, 0]), defaultdict(lambda: [0.0, 0])
    for e in events:
        into = host if e.device_type() == torch.autograd.DeviceType.CPU else kernels
        if not e.name().startswith(RANGE):
            into[e.name()[:90]][0] += e.duration_ns() / 1e6
            into[e.name()[:90]][1] += 1
    regions = sorted(({"region": k, **v} for k, v in region_times(events).items()),
                     key=lambda r: -r["gpu_ms"] - r["host_ms"])
    top = lambda table: sorted(table.items(), key=lambda kv: -kv[1][0])[:limit]  # noqa: E731
    return {"wall_s": wall, "gpu_kernel_ms": sum(ms for ms, _ in kernels.values()), "regions": regions,
            "kernels": [{"kernel": k, "ms": ms, "calls": n} for k, (ms, n) in top(kernels)],
            "host_inclusive": [{"op": k, "ms": ms, "calls": n} for k, (ms, n) in top(host)]}


def cprofiled_run(engine, requests, sync, path: Path, limit=45) -> float:
    """One run under cProfile; its tables as text at `path`; the run's wall seconds."""
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        wall = run_workload(engine, requests, sync)
    finally:
        profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    text.write(f"wall {wall:.3f} s under cProfile\n")
    stats.sort_stats("tottime").print_stats(limit)
    stats.sort_stats("cumulative").print_stats(limit)
    stats.sort_stats("tottime").print_callers(15)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.getvalue())
    return wall


def progress(line: str) -> None:
    print(time.strftime("%H:%M:%S"), line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="nemotron")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a smoke test on the cut")
    parser.add_argument("--cprofile", action="store_true", help="one more run per contract under cProfile")
    args = parser.parse_args()
    device.select(args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    record = {**provenance(), "args": vars(args), "models": {}}
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix="c10-profile-") as folder:  # the subject's config only
            subject = c10_subject({"model": model, "size": subject_size(model, args.device), "checkpoint": None,
                                   "folder": folder})
            asked = plan(args.device, args.seed, subject)
            config = load_model_config(asked["config"])
        progress(f"{model}: seeding {asked['config']}'s weights")
        weights, workload = seeded_weights(config), Workload(**asked["workload"])
        engines = {}
        for name in CONTRACTS:  # built and warmed one after the other, then alternated
            progress(f"{model}: building and warming the {name} engine")
            engines[name] = make_engine(config, load_contract(name), weights, workload, **rollout_options(asked))
            run_workload(engines[name], make_requests(workload, config.vocab_size), sync)
        cells = {name: {"timed": []} for name in CONTRACTS}
        for _ in range(args.runs):
            for name in CONTRACTS:
                cells[name]["timed"].append(timed_run(engines[name], make_requests(workload, config.vocab_size), sync))
        progress(f"{model}: timed runs done; profiling")
        for name in CONTRACTS:
            cells[name]["profiled"] = profiled_run(engines[name], make_requests(workload, config.vocab_size), sync)
            if args.cprofile:
                path = Path(args.out) / f"cprofile-{model}-{name}.txt"
                cells[name]["cprofile_wall_s"] = cprofiled_run(
                    engines[name], make_requests(workload, config.vocab_size), sync, path)
        tokens = workload.num_sequences * workload.new_tokens
        record["models"][model] = {"plan": asked, "tokens": tokens, "contracts": cells}
        del engines
        write_raw(record, args.out, f"gpu_c10_profile-{model}")  # each model's raw results before its table
        summarize(model, record["models"][model])
        sys.stdout.flush()
    return 0


def summarize(model: str, entry: dict) -> None:
    print(f"\n== {model} ({entry['plan']['config']}), {entry['tokens']} tokens a run")
    for name, cell in entry["contracts"].items():
        walls = [run["wall_s"] for run in cell["timed"]]
        print(f"-- {name}: runs {', '.join(f'{w:.3f}' for w in walls)} s "
              f"({entry['tokens'] / min(walls):.0f} tok/s best)")
        for kind, figures in sorted(cell["timed"][0]["by_kind"].items(), key=lambda kv: -kv[1]["s"]):
            print(f"   {kind:<22} {figures['steps']:>4} steps {1e3 * figures['s']:9.1f} ms "
                  f"({1e3 * figures['s'] / figures['steps']:.2f} ms a step)")
        prof = cell["profiled"]
        print(f"   profiled run: wall {prof['wall_s']:.3f} s, GPU kernels {prof['gpu_kernel_ms']:.1f} ms")
        for region in prof["regions"][:14]:
            print(f"   region {region['region']:<36} {region['calls']:>6} calls host {region['host_ms']:8.1f} ms "
                  f"gpu {region['gpu_ms']:8.1f} ms")
        for kernel in prof["kernels"][:12]:
            print(f"   kernel {kernel['kernel'][:60]:<60} {kernel['ms']:8.2f} ms {kernel['calls']:>6}")
        for op in prof["host_inclusive"][:8]:
            print(f"   host   {op['op'][:60]:<60} {op['ms']:8.2f} ms {op['calls']:>6}")


if __name__ == "__main__":
    sys.exit(main())
