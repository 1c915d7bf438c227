"""The cores a timed GPU process is held to, and what it records about the machine it ran on.

On CUDA, C10's samples spread between processes while the runs inside one agree to a few
percent (benchmarks/RESULTS.md): a process is fast or slow as a whole. What can differ between
processes is the host core it lands on (the mixed steps are host-bound) and the GPU's clocks.
So both sides are held to the same cores and every run records the core it last ran on and
the GPU's SM and memory clocks (nvidia-smi; None where it cannot be asked). C10's timed
worker (gates/timed_worker.py) inlines these functions' source: the frozen baseline's tree
may predate this module.
"""
import os
import subprocess


def timing_cores(count: int = 4) -> list:
    """The last `count` cores this process may run on (away from core 0, where interrupts and
    housekeeping land by default): every timed process is held to them."""
    return sorted(os.sched_getaffinity(0))[-count:]


def hold_to_cores(cores) -> None:
    """Hold this process (and the threads it starts later) to `cores`; nothing if empty."""
    if cores:
        os.sched_setaffinity(0, cores)


def machine_state() -> dict:
    """The core this process last ran on, and the GPU's clocks (MHz), temperature and power now."""
    with open("/proc/self/stat") as stat:  # field 39, `processor`: the 37th after the command's ")"
        state = {"cpu": int(stat.read().rsplit(")", 1)[1].split()[36])}
    fields = ("sm_mhz", "memory_mhz", "temperature_c", "power_w")
    try:
        answer = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw",
                                 "--format=csv,noheader,nounits", f"--id={os.environ.get('CUDA_VISIBLE_DEVICES', '0').split(',')[0]}"],
                                capture_output=True, text=True, timeout=10)
        values = [float(v) for v in answer.stdout.strip().split(",")]
    except (OSError, subprocess.SubprocessError, ValueError):
        values = [None] * len(fields)
    return {**state, **dict(zip(fields, values if len(values) == len(fields) else [None] * len(fields)))}
