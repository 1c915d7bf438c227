"""A layout bound to process groups as one rank sees it, its collectives, the comm fingerprint.

Collectives (all-gather, all-reduce, all-to-all, object gather) are counted, so a gate can show
communication happened, and run on the transport's device (gloo: CPU; NCCL: this rank's GPU);
objects cross as host copies. `build_groups(layout)` places a layout on ranks [0, world_size),
None elsewhere; new_group is collective, so every rank calls it for every layout in one order.
"""
import os
from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from kernels.layout.layout import Layout


class Axis:
    """One parallel dimension (tp, ep or dp) as this rank sees it; a one-rank axis moves
    nothing (and keeps autograd's graph, as no collective runs)."""

    def __init__(self, name: str, ranks: list, rank: int, calls: Counter, group=None, device="cpu"):
        self.name, self.ranks, self.calls, self.group = name, ranks, calls, group
        self.size, self.rank = len(ranks), ranks.index(rank)
        self.device = torch.device(device)
        """Where this transport's tensors live (the counts of an all-to-all too)."""

    def _count(self, kind: str) -> None:
        self.calls[f"{self.name}.{kind}"] += 1

    def gather(self, tensor) -> list:
        """Every rank's `tensor` (same shape everywhere), in rank order: moves bits only."""
        if self.size == 1:
            return [tensor]
        self._count("all_gather")
        out = [torch.empty_like(tensor) for _ in range(self.size)]
        dist.all_gather(out, tensor.contiguous(), group=self.group)
        return out

    def gather_rows(self, tensor, counts: list) -> list:
        """Every rank's `tensor` when ranks hold different numbers of rows (rank r: counts[r]
        along dim 0), in rank order: each rank pads to the longest with zeros for the
        all-gather, and the padding is dropped again."""
        padding = tensor.new_zeros((max(counts) - tensor.shape[0],) + tuple(tensor.shape[1:]))
        return [part[:count] for part, count in zip(self.gather(torch.cat([tensor, padding])), counts)]

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM):
        """The transport's reduction, in the transport's order (what the fast layouts use)."""
        if self.size == 1:
            return tensor
        self._count("all_reduce")
        out = tensor.detach().clone()
        dist.all_reduce(out, op=op, group=self.group)
        return out

    def exchange_counts(self, send_counts: list) -> list:
        """How many rows each rank will receive from each other rank (all-to-all of counts)."""
        if self.size == 1:
            return list(send_counts)
        recv = torch.empty(self.size, dtype=torch.int64, device=self.device)
        dist.all_to_all_single(recv, torch.tensor(send_counts, dtype=torch.int64, device=self.device),
                               group=self.group)
        return recv.tolist()

    def all_to_all(self, tensor, send_counts: list, recv_counts: list):
        """Rows [sum(send_counts), ...] grouped by destination rank -> the rows sent here,
        grouped by source rank."""
        if self.size == 1:
            return tensor
        self._count("all_to_all")
        out = tensor.new_empty((sum(recv_counts),) + tuple(tensor.shape[1:]))
        dist.all_to_all_single(out, tensor.contiguous(), output_split_sizes=recv_counts,
                               input_split_sizes=send_counts, group=self.group)
        return out

    def gather_objects(self, obj) -> list:
        """Every rank's picklable `obj`, in rank order, its tensors as host copies."""
        if self.size == 1:
            return [obj]
        self._count("all_gather_object")
        out = [None] * self.size
        dist.all_gather_object(out, host_copy(obj), group=self.group)
        return out


def host_copy(obj):
    """`obj` with every tensor inside its lists, tuples and dicts copied to the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, (list, tuple)):
        return type(obj)(host_copy(item) for item in obj)
    if isinstance(obj, dict):
        return {key: host_copy(value) for key, value in obj.items()}
    return obj


@dataclass
class LayoutGroups:
    """What a rank of a layout needs: its axes and the comm fingerprint."""

    layout: Layout
    """The layout this rank belongs to."""
    rank: int
    """This process's rank inside the layout."""
    tp: Axis
    """Tensor-parallel axis."""
    ep: Axis
    """Expert-parallel axis."""
    dp: Axis
    """Data-parallel axis."""
    comm: dict
    """{"comm_backend", "comm_transport"}: part of the deployment identity."""
    device: torch.device
    """Where this rank computes and communicates."""
    calls: Counter = field(default_factory=Counter)
    """Collectives run, by "<axis>.<kind>" (shared with the axes)."""


def _axis_groups(layout: Layout) -> dict:
    """{axis: [rank lists]} of every group along each axis, in a fixed order."""
    tp, ep, dp = layout.tp, layout.ep, layout.dp

    def rank(d, e, t):
        return (d * ep + e) * tp + t
    return {"tp": [[rank(d, e, t) for t in range(tp)] for d in range(dp) for e in range(ep)],
            "ep": [[rank(d, e, t) for e in range(ep)] for d in range(dp) for t in range(tp)],
            "dp": [[rank(d, e, t) for d in range(dp)] for e in range(ep) for t in range(tp)]}


def build_groups(layout: Layout):
    """This rank's LayoutGroups for `layout` placed on ranks [0, world_size), or None when
    this rank is outside it. Collective: every rank of the world calls it."""
    world, me = dist.get_world_size(), dist.get_rank()
    if layout.world_size > world:
        raise ValueError(f"layout {layout}: needs {layout.world_size} ranks, the world has {world}")
    backend = dist.get_backend()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    calls, axes = Counter(), {}
    for name, rank_lists in _axis_groups(layout).items():
        for ranks in rank_lists:
            group = dist.new_group(ranks) if len(ranks) > 1 else None
            if me in ranks:
                axes[name] = Axis(name, ranks, me, calls, group, device)
    if me >= layout.world_size:
        return None
    return LayoutGroups(layout, me, axes["tp"], axes["ep"], axes["dp"], comm_fingerprint_of(backend), device, calls)


def _transport(backend: str) -> str:
    if backend == "gloo":
        device = os.environ.get("GLOO_DEVICE_TRANSPORT", "tcp").lower()
        return f"{device} on {os.environ.get('GLOO_SOCKET_IFNAME', 'the host interface')}"
    if backend == "nccl":
        version = ".".join(str(v) for v in torch.cuda.nccl.version())
        settings = " ".join(f"{k}={os.environ.get(k, 'auto')}" for k in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE"))
        return f"nccl {version} {settings}"
    return backend


def comm_fingerprint_of(backend: str) -> dict:
    """The backend and its transport as both sides report them."""
    return {"comm_backend": backend, "comm_transport": _transport(backend)}


def comm_fingerprint(groups) -> dict:
    """A runtime's comm fingerprint: "none" for a single process (no layout)."""
    return {"comm_backend": "none", "comm_transport": "none"} if groups is None else dict(groups.comm)
