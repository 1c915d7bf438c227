"""How a process that is timed in CPU time is started (C10 on the CPU, harness profile), so
that its CPU time is its own work whatever runs beside it.

torch's intra-op threads meet at OpenMP barriers; by default a thread that arrives first
spins, burning CPU time while the thread it waits for is descheduled by a neighbour. Beside
two busy processes on 2 cores a C10 sample's CPU-time throughput then fell 30-fold (3 tok/s
against 80-160), on both sides at random. With OMP_WAIT_POLICY=PASSIVE a waiting thread
sleeps: a matmul loop took 0.16 s of CPU idle, 0.35 s beside two busy processes by default,
0.17 s passive. The variable must be set before the OpenMP runtime starts, so it goes into
the environment of the child process, on both sides of a comparison alike.
"""
import os

PASSIVE_OPENMP = {"OMP_WAIT_POLICY": "PASSIVE"}


def timed_environment(**extra) -> dict:
    """os.environ for a child timed in CPU time: waiting OpenMP threads sleep; `extra` on top."""
    return {**os.environ, **PASSIVE_OPENMP, **extra}
