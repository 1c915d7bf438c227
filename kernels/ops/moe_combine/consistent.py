"""moe_combine.consistent: each slot's weight applied once, the slots summed in fp32 in slot
order (reduction.ordered_sum), + shared, one rounding."""
from kernels.ops.reduction import ordered_sum


def combine_consistent(slot_outputs, ids, weights, shared_out):
    """fp32: w_0*y_0 + w_1*y_1 + ... + w_{k-1}*y_{k-1} in slot order, each weight applied
    once to its slot's (unweighted, experts_consistent) output, then + shared; one rounding
    to the slot outputs' dtype. `ids` is not used: slot order, not expert order."""
    weighted = slot_outputs.float() * weights.float().unsqueeze(-1)  # [M, k, H]
    acc = ordered_sum(weighted.transpose(1, 2)) + shared_out.float()  # [M, H]
    return acc.to(slot_outputs.dtype)
