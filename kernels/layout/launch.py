"""Starting a layout's processes on one machine, for tests and gates or under torchrun.

`run_processes` (torch.multiprocessing) or `init_from_env` (torchrun); gloo on CPU, NCCL on GPU,
the rendezvous on a free loopback TCP port. gloo children are forked where the platform allows
(spawn re-imports torch in each) and set their own thread count before any arithmetic; NCCL
children are spawned (CUDA cannot run in a child forked after the parent used it), rank r on GPU r.
"""
import datetime
import os
import socket
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TIMEOUT = datetime.timedelta(seconds=300)
"""A collective that waits longer than this fails instead of hanging the caller."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _loopback_only() -> None:
    """gloo opens its connections on the interface it is given: keep them on loopback."""
    if "lo" in {name for _, name in socket.if_nameindex()}:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")


def init_process(rank: int, world_size: int, port: int, backend: str = "gloo") -> None:
    """Join the default process group of `world_size` ranks rendezvousing on 127.0.0.1:port."""
    if backend == "gloo":
        _loopback_only()
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=TIMEOUT)


def init_from_env(backend: str | None = None) -> int:
    """Join the group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR/PORT); returns the rank."""
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "gloo":
        _loopback_only()
    else:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend, timeout=TIMEOUT)
    return dist.get_rank()


def check_gpus(world_size: int) -> None:
    """ValueError when NCCL would need more GPUs than this machine has (one per rank)."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < world_size:
        raise ValueError(f"nccl: {world_size} ranks need {world_size} GPUs, this machine has {count}")


def _worker(rank, world_size, port, backend, threads, fn, args, out):
    torch.set_num_threads(threads)
    if backend == "nccl":
        torch.cuda.set_device(rank)  # one GPU per rank
    init_process(rank, world_size, port, backend)
    try:
        result = fn(rank, *args)
        if rank == 0:
            torch.save(result, out)
    finally:
        dist.destroy_process_group()


def run_processes(fn, world_size: int, *args, threads: int = 1, backend: str = "gloo",
                  start_method: str | None = None):
    """Run fn(rank, *args) in `world_size` processes joined in one process group; returns
    rank 0's result (fn must be importable by name; rank 0 returns host tensors). A failing
    rank fails the call."""
    if backend == "nccl":
        check_gpus(world_size)
    forkable = sys.platform == "linux" and backend != "nccl"
    method = start_method or ("fork" if forkable else "spawn")
    with tempfile.TemporaryDirectory(prefix="layout-") as folder:
        out = os.path.join(folder, "rank0.pt")
        mp.start_processes(_worker, args=(world_size, free_port(), backend, threads, fn, args, out),
                           nprocs=world_size, start_method=method)
        return torch.load(out, weights_only=False)
