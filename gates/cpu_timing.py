"""How a process that is timed in CPU time is started (C10 on the CPU, harness profile), so
that its CPU time is its own work whatever runs beside it: one intra-op thread.

With torch's two intra-op threads, the threads meet at OpenMP barriers. By default the one
that arrives first spins, burning CPU time while the thread it waits for is descheduled by a
neighbour: beside two busy processes on 2 cores a C10 sample's CPU-time throughput fell
30-fold at random (3 tok/s against 80-160, either side). A passive wait sleeps instead but
pays a wake-up per barrier, thousands a step at the cut's sizes: idle C10 samples then spread
185-297 tok/s and the ratio stayed inconclusive after 7 pairs. One thread has no barrier: its
CPU time is its work, idle or loaded (idle samples 287-429 tok/s, CPU time = wall time, no
slower than two threads at these sizes). Set before torch starts, so it goes into the child
process's environment, on both sides of a comparison alike. Figures: benchmarks/RESULTS.md.
"""
import os

ONE_INTRA_OP_THREAD = {"OMP_NUM_THREADS": "1"}


def timed_environment(**extra) -> dict:
    """os.environ for a child timed in CPU time: one intra-op thread; `extra` on top."""
    return {**os.environ, **ONE_INTRA_OP_THREAD, **extra}
