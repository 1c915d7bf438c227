"""Data parallelism for the trainer: which sequences each replica scores, and how gradients
from the replicas meet.

fixed_tree: the micro-batches are the single-replica ones (consecutive runs of
micro_batch_size sequences); replica d takes a contiguous block of them. Each micro-batch's
gradient is a leaf (its share of the loss, backward alone); the leaves are all-gathered one
parameter at a time (tensors on the transport's device, so a full-width model never goes
through pickling or host memory) and added in one pairwise tree by micro-batch index in
fp32, rounded once to the parameter dtype, so any DP degree sums the same leaves in the same
order. Per-token log-probs do not depend on
which replica computed a micro-batch (the same arithmetic on the same rows).
rank_order: sequences dealt round robin (as a distributed sampler does), micro-batched per
replica, each replica's gradient accumulated by autograd and all-reduced (the transport's order).
"""
import torch

from kernels.layout.tree import tree_sum
from kernels.trainer.logprobs import sequence_logprobs
from kernels.trainer import micro_batch


def replica_shares(num_sequences: int, micro_batch_size: int, dp: int, dp_reduce: str) -> list:
    """Per replica: the micro-batches it computes, each (index, [sequence indices])."""
    if dp_reduce == "rank_order":
        return [[(d, list(range(d, num_sequences, dp)))] for d in range(dp)]
    batches = micro_batch.micro_batches(num_sequences, micro_batch_size)
    base, extra = divmod(len(batches), dp)
    bounds = [d * base + min(d, extra) for d in range(dp + 1)]
    return [list(enumerate(batches))[bounds[d]:bounds[d + 1]] for d in range(dp)]


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
    share = replica_shares(len(sequences), micro_batch_size, groups.dp.size, trainer.dispatch.policy.dp_reduce)
    pairs = []
    for _, indices in share[groups.dp.rank]:
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
    share = replica_shares(len(sequences), trainer.micro_batch_size, groups.dp.size, dp_reduce)
    local = [(batch, indices, *micro_batch.leaf(trainer, sequences, advantages, old_logprobs, indices))
             for batch, indices in share[groups.dp.rank] if indices]
    params = dict(trainer.model.named_parameters())
    if dp_reduce == "fixed_tree":
        counts = [len([indices for _, indices in part if indices]) for part in share]
        gradients = {}
        for name, p in params.items():
            gradients[name] = tree_sum(_leaves_in_order(groups.dp, [leaf[4][name] for leaf in local], counts,
                                                        p.shape, p.device)).to(p.dtype)
            for leaf in local:
                del leaf[4][name]  # one parameter's leaves at a time: a full-width model fits
        loss = tree_sum(_leaves_in_order(groups.dp, [leaf[3] for leaf in local], counts, (), groups.device))
    else:
        grads = local[0][4] if local else {name: torch.zeros(p.shape, device=p.device) for name, p in params.items()}
        gradients = {name: groups.dp.all_reduce(grads[name].to(p.dtype)) for name, p in params.items()}
        loss = groups.dp.all_reduce((local[0][3] if local else torch.zeros((), device=groups.device)).reshape(1))
    scored = [pair for part in groups.dp.gather_objects([(leaf[1], leaf[2]) for leaf in local]) for pair in part]
    for name, param in params.items():
        param.grad = gradients[name]
    trainer.optimizer.step()
    logprobs = _in_order([list(zip(indices, lps)) for indices, lps in scored], len(sequences), groups.device)
    return {"loss": float(loss), "logprobs": logprobs, "gradients": gradients}
