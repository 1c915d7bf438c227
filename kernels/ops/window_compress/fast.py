"""window_compress's fast variants, as the reference implementation and engines run them. Prefill:
the softmax over the slots in fp32, cast to the kv dtype, times kv and torch's sum. Decode: a
running online softmax per window (max, denominator and weighted sum rescaled as each token comes),
emitting the block when the window closes; no rows kept, so its bits are not the prefill's."""
import torch

from kernels.ops.window_compress.forms import after, window_slots, with_pending


def fast_prefill(kv, gate, position_bias, state, *, rate, overlap):
    kv_all, gate_all = with_pending(state, kv, gate, position_bias)
    kv_slots, gate_slots = window_slots(kv_all, gate_all, state, rate=rate, overlap=overlap)
    weights = gate_slots.softmax(dim=1, dtype=torch.float32).to(kv_slots.dtype)
    return (kv_slots * weights).sum(dim=1).float(), after(kv_all, gate_all, state, rate=rate, overlap=overlap)


def fast_decode(kv, gate, position_bias, state, *, rate, overlap):
    """Token by token: the window's slots folded into (max, denominator, sum) as they arrive."""
    blocks, current = [], state
    for t in range(kv.shape[0]):
        kv_all, gate_all = with_pending(current, kv[t:t + 1], gate[t:t + 1], position_bias)
        if kv_all.shape[0] == rate:
            kv_slots, gate_slots = window_slots(kv_all, gate_all, current, rate=rate, overlap=overlap)
            blocks.append(_online(kv_slots[0].float(), gate_slots[0]))
        current = after(kv_all, gate_all, current, rate=rate, overlap=overlap)
    dim = kv.shape[-1] // (2 if overlap else 1)
    return (torch.stack(blocks) if blocks else kv.new_zeros(0, dim, dtype=torch.float32)), current


def _online(kv_slots, gate_slots) -> torch.Tensor:
    """[slots, D] -> [D]: the online softmax's running rescale, one slot at a time."""
    top = torch.full_like(gate_slots[0], float("-inf"))
    denominator, acc = torch.zeros_like(top), torch.zeros_like(top)
    for z, v in zip(gate_slots, kv_slots):
        new_top = torch.maximum(top, z)
        rescale = torch.where(top == float("-inf"), torch.zeros_like(top), torch.exp(top - new_top))
        e = torch.where(z == float("-inf"), torch.zeros_like(z), torch.exp(z - new_top))
        denominator, acc, top = denominator * rescale + e, acc * rescale + e * v, new_top
    return acc / denominator
