"""The compressor's state and the slots of a window, shared by both contracts."""
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class WindowState:
    """A sequence's compressor state between calls; a new state holds nothing."""

    pending_kv: torch.Tensor | None = None
    """[< m, W] rows of the unfinished window, as the projection gave them."""
    pending_gate: torch.Tensor | None = None
    """[< m, W] their gates, position bias added (fp32)."""
    overlap_kv: torch.Tensor | None = None
    """[m, D] the last complete window's Ca half (CSA only)."""
    overlap_gate: torch.Tensor | None = None
    emitted: int = 0
    """Windows compressed so far: the next window starts at position emitted * m."""


def with_pending(state: WindowState, kv, gate, position_bias) -> tuple:
    """(kv, gate + position_bias) of the state's unfinished window, then the new rows: each new gate
    biased in fp32 by its row's offset in its window (the pending rows' were when they came)."""
    pending = 0 if state.pending_kv is None else state.pending_kv.shape[0]
    offsets = (torch.arange(gate.shape[0], device=gate.device) + pending) % position_bias.shape[0]
    gate = gate.float() + position_bias.float()[offsets]
    if state.pending_kv is None:
        return kv, gate
    return torch.cat([state.pending_kv, kv]), torch.cat([state.pending_gate, gate])


def window_slots(kv, gate, state: WindowState, *, rate: int, overlap: bool) -> tuple:
    """([n, slots, D] kv, [n, slots, D] gates) of the n windows complete in kv/gate (which start
    on a window boundary), CSA's Ca slots from the window before (the state's for the first)."""
    n = kv.shape[0] // rate
    kv_w, gate_w = (t[:n * rate].reshape(n, rate, t.shape[-1]) for t in (kv, gate))
    if n == 0 and overlap:
        slots, dim = 2 * rate, kv.shape[-1] // 2
        return kv.new_zeros(0, slots, dim), gate.new_zeros(0, slots, dim)
    if not overlap:
        return kv_w, gate_w
    dim = kv_w.shape[-1] // 2
    prior_kv = kv_w.new_zeros(1, rate, dim) if state.overlap_kv is None else state.overlap_kv[None].to(kv_w.dtype)
    prior_gate = (gate_w.new_full((1, rate, dim), float("-inf")) if state.overlap_gate is None
                  else state.overlap_gate[None])
    ca_kv, ca_gate = torch.cat([prior_kv, kv_w[:-1, :, :dim]]), torch.cat([prior_gate, gate_w[:-1, :, :dim]])
    return torch.cat([ca_kv, kv_w[:, :, dim:]], dim=1), torch.cat([ca_gate, gate_w[:, :, dim:]], dim=1)


def after(kv, gate, state: WindowState, *, rate: int, overlap: bool) -> WindowState:
    """The state once kv/gate (starting on a boundary) are consumed."""
    n = kv.shape[0] // rate
    rest_kv, rest_gate = kv[n * rate:], gate[n * rate:]
    pending = (rest_kv, rest_gate) if rest_kv.shape[0] else (None, None)
    overlap_kv, overlap_gate = state.overlap_kv, state.overlap_gate
    if overlap and n:
        dim = kv.shape[-1] // 2
        overlap_kv, overlap_gate = kv[(n - 1) * rate:n * rate, :dim], gate[(n - 1) * rate:n * rate, :dim]
    return WindowState(*pending, overlap_kv, overlap_gate, state.emitted + n)
