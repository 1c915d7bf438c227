"""moe_combine.fast: the slots' weighted outputs summed in fp32 as vLLM's moe_sum, then + shared
in the activation dtype (two roundings, as HF)."""


def combine_fast(weighted_slot_outputs, ids, weights, shared_out):
    """The top-k slots' weighted outputs summed in fp32 (as vLLM's moe_sum reduces over
    top-k), rounded to the activation dtype, then + shared in the activation dtype (two
    roundings, as HF). Expects outputs already weighted by experts_fast (weights rounded into
    the activation before down_proj), so `weights` and `ids` are not used."""
    acc = weighted_slot_outputs.float().sum(dim=1)
    return acc.to(shared_out.dtype) + shared_out
