"""Data parallelism for the trainer: which sequences each replica scores, and how gradients meet.

fixed_tree: the leaves are the single-replica ones (kernels/trainer/gradient_leaves.py); replica d
takes a contiguous block of whole leaves (the degree divides the leaf count); leaf sums are
all-gathered a parameter at a time on the transport's device and added in one pairwise tree by
leaf index in fp32, rounded once: any such degree adds the same leaves in the same order, and a
micro-batch's log-probs do not depend on its replica. rank_order: sequences dealt round robin,
each replica's gradient accumulated by autograd and all-reduced in the transport's order.
"""
import torch

from kernels.layout.tree import tree_sum
from kernels.trainer.gradient_leaves import folded_leaf, leaf_groups
from kernels.trainer.logprobs import sequence_logprobs


def replica_shares(num_sequences: int, micro_batch_size: int, dp: int, dp_reduce: str, num_leaves: int) -> list:
    """Per replica: the leaves it computes, each a list of micro-batches ([sequence indices])."""
    if dp_reduce == "rank_order":
        return [[[list(range(d, num_sequences, dp))]] for d in range(dp)]
    if num_leaves % dp:
        raise ValueError(f"data parallel {dp}: the update's {num_leaves} gradient leaves do not split over "
                         f"{dp} replicas (set the trainer's gradient_leaves to a multiple of the degree)")
    leaves, per_rank = leaf_groups(num_sequences, micro_batch_size, num_leaves), num_leaves // dp
    return [leaves[d * per_rank:(d + 1) * per_rank] for d in range(dp)]


def _in_order(gathered, num_sequences: int, device) -> list:
    """[(sequence index, log-probs)] lists from every replica (host copies) -> log-probs in
    sequence order, back on this rank's device."""
    result = [None] * num_sequences
    for pairs in gathered:
        for index, value in pairs:
            result[index] = value.to(device)
    return result


def score(trainer, sequences, micro_batch_size: int, layout: str) -> list:
    """Per-token log-probs of every sequence, the work split over the DP replicas."""
    groups = trainer.parallel
    share = replica_shares(len(sequences), micro_batch_size, groups.dp.size, trainer.dispatch.policy.dp_reduce,
                           trainer.gradient_leaves)
    pairs = []
    for indices in [batch for leaf in share[groups.dp.rank] for batch in leaf]:
        logprobs = sequence_logprobs(trainer.model, trainer.dispatch, [sequences[i] for i in indices],
                                     "trainer_fwd", micro_batch_size=micro_batch_size, layout=layout)
        pairs.extend(zip(indices, logprobs))
    return _in_order(groups.dp.gather_objects(pairs), len(sequences), groups.device)


def _leaves_in_order(axis, mine: list, counts: list, shape, device) -> list:
    """Every replica's leaves of one tensor (fp32, `shape`) in micro-batch order: the replicas'
    blocks are contiguous and in rank order, so the rank-order gather is the micro-batch order."""
    stacked = torch.stack(mine) if mine else torch.zeros((0, *shape), device=device)
    return [leaf for part in axis.gather_rows(stacked, counts) for leaf in part]


def train_step(trainer, sequences, advantages, old_logprobs) -> dict:
    """One optimizer update with the gradient reduced as the contract's dp_reduce says;
    returns the loss, the update's log-probs and the reduced gradients."""
    groups = trainer.parallel
    if groups.layout.tp > 1 or groups.layout.ep > 1:
        raise NotImplementedError(f"train_step in {groups.layout}: backward through the TP/EP "
                                  f"collectives is not built; those layouts score only")
    dp_reduce = trainer.dispatch.policy.dp_reduce
    share = replica_shares(len(sequences), trainer.micro_batch_size, groups.dp.size, dp_reduce,
                           trainer.gradient_leaves)
    local = [folded_leaf(trainer, sequences, advantages, old_logprobs, batches)
             for batches in share[groups.dp.rank] if any(batches)]
    params = dict(trainer.model.named_parameters())
    if dp_reduce == "fixed_tree":
        counts = [len([batches for batches in part if any(batches)]) for part in share]
        gradients = {}
        for name, p in params.items():
            gradients[name] = tree_sum(_leaves_in_order(groups.dp, [leaf[2][name] for leaf in local], counts,
                                                        p.shape, p.device)).to(p.dtype)
            for leaf in local:
                del leaf[2][name]  # one parameter's leaves at a time: a full-width model fits
        loss = tree_sum(_leaves_in_order(groups.dp, [leaf[1] for leaf in local], counts, (), groups.device))
    else:
        grads = local[0][2] if local else {name: torch.zeros(p.shape, device=p.device) for name, p in params.items()}
        gradients = {name: groups.dp.all_reduce(grads[name].to(p.dtype)) for name, p in params.items()}
        loss = groups.dp.all_reduce((local[0][1] if local else torch.zeros((), device=groups.device)).reshape(1))
    scored = [pairs for part in groups.dp.gather_objects([leaf[0] for leaf in local]) for pairs in part]
    for name, param in params.items():
        param.grad = gradients[name]
    trainer.optimizer.step()
    logprobs = _in_order(scored, len(sequences), groups.device)
    return {"loss": float(loss), "logprobs": logprobs, "gradients": gradients}
