"""window_compress.consistent: windows at absolute positions, each block one fp32 softmax over its
slots and one sum in slot order (reduction.ordered_sum: no reduction kernel picks an order by shape), the
unfinished window kept in the state and completed by a later call."""
import torch

from kernels.ops.reduction import ordered_sum
from kernels.ops.window_compress.forms import after, window_slots, with_pending


def slot_ordered_block(kv_slots, gate_slots) -> torch.Tensor:
    """[n, slots, D] -> [n, D] fp32: sum_j softmax_j(z) kv_j, every sum in slot order."""
    z = gate_slots.float()
    top = z.amax(dim=1)  # a max is exact in any order
    weights = torch.exp(z - top[:, None])  # [n, slots, D]
    total = ordered_sum(weights.transpose(1, 2))  # [n, D]
    return ordered_sum(((weights / total[:, None]) * kv_slots.float()).transpose(1, 2))


def consistent(kv, gate, position_bias, state, *, rate, overlap):
    """kv, gate [T, W] of new rows -> (blocks [n, D] fp32 of the windows they complete, next state)."""
    kv_all, gate_all = with_pending(state, kv, gate, position_bias)
    kv_slots, gate_slots = window_slots(kv_all, gate_all, state, rate=rate, overlap=overlap)
    blocks = slot_ordered_block(kv_slots, gate_slots) if kv_slots.shape[0] else kv_all.new_zeros(
        0, kv_slots.shape[-1], dtype=torch.float32)
    return blocks, after(kv_all, gate_all, state, rate=rate, overlap=overlap)
