"""The fixed leaves a GRPO update's gradient adds over.

A step's micro-batches are cut into `num_leaves` contiguous leaves, leaf j taking base + (j < extra)
(base, extra = divmod(micro-batches, num_leaves)): a function of the two counts alone. A leaf folds
its micro-batches' gradients left to right in fp32 into one accumulator; the leaves add in the
pairwise tree by index (kernels/layout/tree.py). So one process holds one accumulator and at most
log2(num_leaves) + 1 partials per parameter, and replicas owning whole leaves add the same numbers
in the same order. Reference: the fold then tree_sum written out (tests/trainer/test_trainer_memory.py).
"""
from kernels.trainer.micro_batch import leaf, micro_batches


def leaf_groups(num_sequences: int, micro_batch_size: int, num_leaves: int) -> list:
    """[leaf][micro-batch] -> sequence indices: the step's micro-batches cut into num_leaves."""
    if num_leaves < 1:
        raise ValueError(f"gradient_leaves: must be at least 1, got {num_leaves}")
    batches = micro_batches(num_sequences, micro_batch_size)
    base, extra = divmod(len(batches), num_leaves)
    bounds = [j * base + min(j, extra) for j in range(num_leaves + 1)]
    return [batches[bounds[j]:bounds[j + 1]] for j in range(num_leaves)]


def folded_leaf(trainer, sequences, advantages, old_logprobs, batches):
    """(log-probs by sequence index, loss, {name: fp32 gradient}) of one leaf: its
    micro-batches' shares, each backward alone, folded left to right in place."""
    scored, loss, folded = [], None, {}
    for indices in batches:
        logprobs, share, grads = leaf(trainer, sequences, advantages, old_logprobs, indices)
        scored.extend(zip(indices, logprobs))
        loss = share.float() if loss is None else loss + share
        for name, grad in grads.items():
            if name not in folded:
                folded[name] = grad.float()  # the fold owns it (a copy, or the handed-over fp32 grad)
            else:
                folded[name].add_(grad)  # fp32 + the bf16 gradient widened: the bits of + .float()
    return scored, loss, folded
