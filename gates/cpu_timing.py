"""How a process that is timed in CPU time is started (C10 on the CPU, harness profile), so that its
CPU time is its own work whatever runs beside it: one intra-op thread.
Two intra-op threads meet at OpenMP barriers: a spinning wait burns CPU time while its partner is
descheduled by a neighbour, and a passive wait pays a wake-up per barrier. One thread has no
barrier, so its CPU time is its work, idle or loaded. The setting goes into the child's
environment before torch starts, on both sides of a comparison alike. Figures:
benchmarks/RESULTS.md, benchmarks/HISTORY.md.
"""
import os

ONE_INTRA_OP_THREAD = {"OMP_NUM_THREADS": "1"}


def timed_environment(**extra) -> dict:
    """os.environ for a child timed in CPU time: one intra-op thread; `extra` on top."""
    return {**os.environ, **ONE_INTRA_OP_THREAD, **extra}
