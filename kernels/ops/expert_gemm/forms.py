"""The routed experts' grouping of (token, slot) pairs by expert, in routing order: per expert on
the host (the CPU loops, fast.py and consistent.py), or on the device without a host sync (the
grouped CUDA GEMMs, cuda.py and fast_cuda.py); and the clamped SwiGLU of DeepSeek-V4's experts."""
import torch

from kernels.ops.activation.consistent import position_independent_sigmoid


def swiglu_limited_once(h, *, limit: float):
    """h = [gate | up] (the packed projection's halves) -> SiLU(min(gate, L)) * clamp(up, -L, L)
    in fp32, rounded once; the clamps are exact, the sigmoid position independent."""
    gate, up = h.float().chunk(2, dim=-1)
    gate = gate.clamp(max=limit)
    return (gate * position_independent_sigmoid(gate) * up.clamp(min=-limit, max=limit)).to(h.dtype)


def swiglu_limited_fast(h, *, limit: float):
    """The same in the activation dtype, as engines compute it: SiLU, then the product, each rounded."""
    gate, up = h.chunk(2, dim=-1)
    return torch.nn.functional.silu(gate.clamp(max=limit)) * up.clamp(min=-limit, max=limit)


def _routing_groups(ids, num_experts):
    """Per expert: (token rows, slots) of the pairs that chose it, in routing order (token,
    then slot). A stable sort of the flat ids keeps that order inside each expert's group."""
    top_k = ids.shape[1]
    order = torch.sort(ids.flatten(), stable=True).indices
    counts = torch.bincount(ids.flatten(), minlength=num_experts).tolist()
    groups = {}
    for expert, pairs in enumerate(torch.split(order, counts)):
        if pairs.numel():
            groups[expert] = (pairs // top_k, pairs % top_k)
    return groups


def _sorted_pairs(ids, num_experts: int):
    """(order of the flat (token, slot) pairs by expert, routing order inside; group starts and
    counts as int32 on the device), without a host sync."""
    by_expert, order = torch.sort(ids.flatten(), stable=True)
    # group bounds by search in the sorted ids: no atomics, no host sync (bincount would sync)
    bounds = torch.searchsorted(by_expert, torch.arange(num_experts + 1, device=ids.device)).to(torch.int32)
    return order, bounds[:-1].contiguous(), (bounds[1:] - bounds[:-1]).contiguous()
