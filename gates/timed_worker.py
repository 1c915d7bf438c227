"""C10's timed worker: a process on one source tree's kernels, run as the program below with its
helpers inlined (a frozen baseline's tree may predate this module). It builds and warms the engine (the
plan's workload and `warm_seeds`, untimed), says `C10 READY`, then for each `GO <seed>` line (a
seed drawn only then; `GO <seed> bits` also keeps the bits) runs the workload, answers
`C10 DONE {"digest": ...}` (sha256 of every completion's tokens and log-prob bits) and says READY
again; any other line ends it with `C10 END {...}` (its own figures: recorded, never judged).
The judge times GO to DONE and reads CPU time from /proc (schedstat, the whole process tree), so
a worker that patches its clocks or answers early changes nothing; a wrong digest fails the gate.
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from hashlib import sha256
from inspect import getsource
from pathlib import Path

import torch

from gates import confine
from gates.cpu_timing import timed_environment
from gates.rollout_clock import timed_rollout
from gates.timing_state import hold_to_cores, host_state, machine_state

PREFIX = "C10 "


def rollout_options(asked: dict) -> dict:
    """The rollout options a plan asks for: its engine settings and, off the CPU, its shape.
    The CPU plan asks for none, so the CPU baseline's older make_engine is called as it was."""
    options = dict(asked.get("engine", {}))
    if "shape" in asked:
        from gates.workload import EngineShape
        options["shape"] = EngineShape(**asked["shape"])
    return options


def mapped_weights(asked: dict) -> dict:
    """The plan's seeded weights, mapped from the file the gate wrote once."""
    return torch.load(asked["weights_file"], mmap=True, weights_only=True)


def completions_digest(completions) -> str:
    """Tokens and log-prob bits of every completion, in order (sha256)."""
    digest = sha256()
    for c in completions:
        digest.update(repr(c.tokens).encode())
        digest.update(c.logprob_tensor.float().cpu().numpy().tobytes())
    return digest.hexdigest()


def record_specializations() -> list:
    """The list Triton's jit_cache_hook appends to: every kernel specialization this process
    compiles or loads from disk (name, launch options and each argument's key: `i32` for an
    integer it does not specialise on, `i32D` for one divisible by 16, a constant's value)."""
    seen = []
    try:
        from triton import knobs
        knobs.runtime.jit_cache_hook = lambda **call: seen.append(call.get("repr", "?")) and None  # None: compile
    except (ImportError, AttributeError):  # no Triton, or one from before knobs
        pass
    return seen


def compiled_state(engine, specialized: list) -> dict:
    """What the engine has compiled so far: how many decode graphs it captured, the entries
    of Triton's on-disk cache (directory name: kernel name), how many specializations Triton
    has made or loaded in this process and how many blocks the CUDA caching allocator has
    asked the driver for."""
    import os
    captured = getattr(getattr(engine, "graphs", None), "_graphs", None)
    cache = Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")
    entries = {}
    for entry in cache.iterdir() if cache.is_dir() else ():
        names = [f.stem for f in entry.glob("*.json") if not f.name.startswith("__grp__")]
        entries[entry.name] = names[0] if names else "?"
    mallocs = torch.cuda.memory_stats().get("segment.all.allocated", 0) if torch.cuda.is_initialized() else 0
    return {"graphs": len(captured or ()), "triton": entries, "specialized": len(specialized), "cuda_mallocs": mallocs}


def compiled_since(before: dict, engine, specialized: list) -> dict:
    """Decode graphs captured, Triton kernels compiled (by name), specializations made or
    loaded (Triton's description) and driver allocations since `before`: what a timed run paid
    for inside the judge's clock."""
    after = compiled_state(engine, specialized)
    return {"graphs": after["graphs"] - before["graphs"],
            "triton_kernels": sorted(name for key, name in after["triton"].items() if key not in before["triton"]),
            "specializations": specialized[before["specialized"]:],
            "cuda_mallocs": after["cuda_mallocs"] - before["cuda_mallocs"]}


def completions_bits(completions) -> list:
    """[tokens, log-prob int32 bit patterns] of every completion: what the trainer must score."""
    return [[list(c.tokens), c.logprob_tensor.float().cpu().view(torch.int32).tolist()] for c in completions]


_PROGRAM = """
import time
phases, phase_started = {{}}, time.perf_counter()
import gc, json, os, subprocess, sys, kernels, torch
phases["import_s"] = time.perf_counter() - phase_started
from gates.faults import register_all
from gates.workload import Workload, make_engine, make_requests
from kernels.contract import load_contract
from kernels.models.config import load_model_config
from hashlib import sha256
from pathlib import Path
{helpers}
specialized = record_specializations()
asked = json.loads(sys.argv[1])
register_all()  # the contract under test may name a planted fault
hold_to_cores(asked.get("cores"))
options, sync = rollout_options(asked), (lambda: None)
if asked.get("device", "cpu") != "cpu":  # the CPU baseline's tree predates gates.device.select
    from gates import device
    device.select(asked["device"])
    sync = torch.cuda.synchronize
config, contract = load_model_config(asked["config"]), load_contract(asked["contract"])
weights, workload = mapped_weights(asked), Workload(**asked["workload"])
phase_started = time.perf_counter()
engine = make_engine(config, contract, weights, workload, **options)
sync()
phases["build_s"], phase_started = time.perf_counter() - phase_started, time.perf_counter()
engine.generate(make_requests(workload, config.vocab_size))
for warm_seed in asked.get("warm_seeds", ()):  # more arrival patterns: shapes the first run missed
    engine.generate(make_requests(Workload(**dict(asked["workload"], seed=warm_seed)), config.vocab_size))
sync()
phases["warm_run_s"] = time.perf_counter() - phase_started
gc.collect()
gc.freeze()  # the warm engine's objects leave the collector's generations, as serving engines do
recorded = asked.get("device", "cpu") != "cpu"
before, runs = (machine_state() if recorded else None), []
print("{prefix}READY", flush=True)
for line in sys.stdin:
    words = line.split()
    if not words or words[0] != "GO":
        break
    run_workload = Workload(**dict(asked["workload"], seed=int(words[1])))
    engine.step_count = 0  # both trees' engines count arrival steps from here
    collections, compiled = [g["collections"] for g in gc.get_stats()], compiled_state(engine, specialized)
    completions, wall_s, cpu_s, _ = timed_rollout(engine, make_requests(run_workload, config.vocab_size), sync)
    digest = completions_digest(completions)
    print("{prefix}DONE " + json.dumps({{"digest": digest}}), flush=True)  # the judge's clock stops here
    runs.append({{"wall_s": wall_s, "cpu_s": cpu_s, "tokens": sum(len(c.tokens) for c in completions),
                 "gc_collections": [g["collections"] - c for g, c in zip(gc.get_stats(), collections)],
                 "after": machine_state() if recorded else None,
                 "compiled": compiled_since(compiled, engine, specialized),
                 "bits": completions_bits(completions) if words[2:] == ["bits"] else None}})
    print("{prefix}READY", flush=True)  # bookkeeping done: the next run's clock may start
print("{prefix}END " + json.dumps({{"kernels": kernels.__file__, "worker_reported": runs,
                                   "phases": phases, "specializations": specialized,
                                   "machine": {{"cores": sorted(os.sched_getaffinity(0)), "before": before}}}}),
      flush=True)
""".format(prefix=PREFIX, helpers="".join(getsource(f) for f in (
    rollout_options, mapped_weights, completions_digest, record_specializations, compiled_state, compiled_since,
    completions_bits, hold_to_cores, host_state, machine_state, timed_rollout)))


def process_tree(pid: int) -> list:
    """`pid` and its live descendants (the kernel's /proc/<pid>/task/<tid>/children)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                pending.extend(int(child) for child in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended between the listing and the read
    return found


def cpu_seconds(pid: int) -> float:
    """CPU time so far of process `pid` and every process under it: each live thread's
    (schedstat, ns) and what their reaped children used (cutime + cstime, clock ticks). A
    worker that hands its work to a child process, or runs under a sandbox's launcher, is
    counted whole."""
    total, ticks = 0.0, os.sysconf("SC_CLK_TCK")
    for process in process_tree(pid):
        try:
            fields = Path(f"/proc/{process}/stat").read_text().rpartition(")")[2].split()
            total += (int(fields[13]) + int(fields[14])) / ticks  # cutime, cstime (fields 16, 17)
            for task in Path(f"/proc/{process}/task").iterdir():
                total += int((task / "schedstat").read_text().split()[0]) / 1e9
        except (FileNotFoundError, ProcessLookupError):
            continue  # a process or thread that ended between the listing and the read
    return total


def default_triton_cache() -> Path:
    """Triton's cache directory as this environment names it."""
    return Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")


def _answer(worker, stderr, word: str) -> str:
    """The payload of the worker's next `C10 <word>` line (other output skipped)."""
    for line in worker.stdout:
        if line.startswith(PREFIX + word):
            return line[len(PREFIX + word):].strip()
    stderr.seek(0)
    raise RuntimeError(f"the timed worker ended before {word} (exit {worker.wait()}): {stderr.read()[-2000:]}")


def drive(tree, asked: dict, seeds: list, *, cwd=None, bits_of_first=False, triton_cache=None) -> dict:
    """Start a worker on `tree`'s kernels (PYTHONPATH=tree, cwd `cwd` or the tree), have it
    generate each seed's workload in turn and time every run from here: {runs: [{seed,
    digest, wall_s, cpu_s}], kernels, worker_reported, machine, process_s, bits (tokens and
    log-prob bits of the first seed's completions when `bits_of_first`)}. The worker is
    confined where the machine allows (gates/confine.py): its own scratch folder and
    `triton_cache` (default: this environment's) the only places it can write, so a
    candidate's worker cannot touch the baseline's tree or the cache the baseline compiles into."""
    started = time.perf_counter()
    cache = Path(triton_cache or default_triton_cache())
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="c10-worker-") as scratch, tempfile.TemporaryFile("w+") as stderr:
        command = [sys.executable, "-c", _PROGRAM, json.dumps(asked)]
        if confine.unavailable() is None:
            command = confine.argv_confined(shlex.join(command), [scratch, str(cache)])
        worker = subprocess.Popen(command, cwd=cwd or tree, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=stderr, bufsize=1, env=timed_environment(
                                      PYTHONPATH=str(tree), TMPDIR=scratch, TRITON_CACHE_DIR=str(cache)))
        try:  # a worker left behind would run beside the next one's timing
            _answer(worker, stderr, "READY")
            runs = []
            for index, seed in enumerate(seeds):
                if index:
                    _answer(worker, stderr, "READY")
                cpu_before, wall_before = cpu_seconds(worker.pid), time.perf_counter()
                worker.stdin.write(f"GO {seed}{' bits' if bits_of_first and index == 0 else ''}\n")
                worker.stdin.flush()
                done = json.loads(_answer(worker, stderr, "DONE"))
                wall, cpu = time.perf_counter() - wall_before, cpu_seconds(worker.pid) - cpu_before
                runs.append({"seed": seed, "digest": done["digest"], "wall_s": wall, "cpu_s": cpu})
            _answer(worker, stderr, "READY")
            worker.stdin.write("END\n")
            worker.stdin.flush()
            end = json.loads(_answer(worker, stderr, "END"))
        except BaseException:
            worker.kill()
            raise
        finally:
            worker.wait()
    if not str(Path(end["kernels"] or "/").resolve()).startswith(str(Path(tree).resolve())):
        raise RuntimeError(f"the timed worker in {tree} imported kernels from {end['kernels']}")
    reported = end["worker_reported"]
    bits = reported[0].pop("bits") if reported and bits_of_first else None
    for run in reported:
        run.pop("bits", None)
    return {**end, "runs": runs, "bits": bits, "process_s": time.perf_counter() - started}
