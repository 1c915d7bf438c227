"""The cores a timed GPU process is held to, and what it records about the machine it ran on.
On CUDA a C10 process is fast or slow as a whole (benchmarks/RESULTS.md): what differs between
processes is the host core it lands on (the mixed steps are host-bound) and the GPU's clocks. So
both sides are held to the same cores, and every run records the core it last ran on, the GPU's
SM and memory clocks (nvidia-smi; None where it cannot be asked), the host's steal time and each
held core's clock. C10's timed worker (gates/timed_worker.py) inlines these functions' source:
the frozen baseline's tree may predate this module.
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


def host_state() -> dict:
    """The host's steal ticks so far (all cores, USER_HZ; a VM's time taken by its neighbours)
    and the clock (MHz) of each core this process may run on; None where /proc does not say."""
    state = {"steal_ticks": None, "core_mhz": {}}
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()  # "cpu user nice system idle iowait irq softirq steal ..."
        state["steal_ticks"] = int(fields[8]) if len(fields) > 8 else None
        held, core = os.sched_getaffinity(0), None
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() == "processor":
                    core = int(value)
                elif key.strip() == "cpu MHz" and core in held:
                    state["core_mhz"][str(core)] = float(value)
    except (OSError, ValueError):
        pass
    return state


def machine_state() -> dict:
    """The core this process last ran on, the host's steal ticks and held cores' clocks, and the
    GPU's clocks (MHz), temperature and power now."""
    with open("/proc/self/stat") as stat:  # field 39, `processor`: the 37th after the command's ")"
        state = {"cpu": int(stat.read().rsplit(")", 1)[1].split()[36])}
    fields = ("sm_mhz", "memory_mhz", "temperature_c", "power_w")
    try:
        answer = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw",
                                 "--format=csv,noheader,nounits",
                                 f"--id={os.environ.get('CUDA_VISIBLE_DEVICES', '0').split(',')[0]}"],
                                capture_output=True, text=True, timeout=10)
        values = [float(v) for v in answer.stdout.strip().split(",")]
    except (OSError, subprocess.SubprocessError, ValueError):
        values = [None] * len(fields)
    return {**state, **host_state(),
            **dict(zip(fields, values if len(values) == len(fields) else [None] * len(fields)))}
