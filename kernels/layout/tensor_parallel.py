"""Tensor parallelism for the linear regions and the log-prob, in the contract's arithmetic.

Column-parallel (N split): each N leaf is one call of the region's own implementation and the
all-gather only concatenates, so a column's bits never see the degree. Row-parallel (K split),
fixed_tree: one fp32 partial per K leaf (out_dtype=float32), the rank's leaves and then the ranks'
roots added in one tree (kernels/layout/tree.py), rounded once; rank_order: a partial per rank
rounded to the activation dtype, summed by all_reduce (bits follow the degree). Vocab-parallel
log-prob: the row max (exact in any order) and per-leaf exp sums, gathered and added in the tree.
"""
import torch
import torch.distributed as dist

from kernels.layout.tree import owned_leaves, tree_sum
from kernels.ops.logprob.forms import scaled
from kernels.ops.reduction import row_sum

COLUMN_REGIONS = ("qkv_proj", "gate_up_proj", "ssm_in_proj", "lm_head")
ROW_REGIONS = ("o_proj", "down_proj", "ssm_out_proj")


def _slices(size, axis, policy, what) -> list:
    """This rank's leaves along a dim: num_leaves of them in the fixed tree, one per rank else."""
    count = policy.num_leaves if policy.tp_reduce == "fixed_tree" else axis.size
    return owned_leaves(size, count, axis.rank, axis.size, what)


def column_parallel(op, x, w, *, axis, policy):
    """y[M, N] = op(x, w) with w's N rows split over the axis; whole y on every rank."""
    local = torch.cat([op(x, w[lo:hi]) for lo, hi in _slices(w.shape[0], axis, policy, "column-parallel N")],
                      dim=-1)
    return torch.cat(axis.gather(local), dim=-1)


def row_parallel(op, x, w, *, axis, policy):
    """y[M, N] = op(x, w) with K split over the axis; whole y on every rank."""
    slices = _slices(w.shape[1], axis, policy, "row-parallel K")
    if policy.tp_reduce == "rank_order":
        (lo, hi), = slices
        return axis.all_reduce(op(x[..., lo:hi], w[:, lo:hi]))
    # fp32 [M, N] each: the region's own GEMM on the leaf, its fp32 sums left unrounded
    partials = [op(x[..., lo:hi], w[:, lo:hi], out_dtype=torch.float32) for lo, hi in slices]
    return tree_sum(axis.gather(tree_sum(partials))).to(x.dtype)


def vocab_parallel_logprob(logits, targets, temperatures, *, full=False, axis, policy):
    """logp = x[t] - logsumexp(x), x = logits / T in fp32, the sum over V split over the
    axis; [R] (or [R, V] with full). Each rank reads only its own vocabulary columns for the
    reduction; the target's logit is read from the whole row the lm_head gathered."""
    x = scaled(logits, temperatures)
    slices = _slices(x.shape[-1], axis, policy, "vocab-parallel V")
    local_max = x[:, slices[0][0]:slices[-1][1]].amax(dim=-1, keepdim=True)  # the rank's leaves are contiguous
    if policy.tp_reduce == "rank_order":
        row_max = axis.all_reduce(local_max, op=dist.ReduceOp.MAX)
        (lo, hi), = slices
        total = axis.all_reduce(torch.exp(x[:, lo:hi] - row_max).sum(dim=-1, keepdim=True))
    else:
        row_max = torch.stack(axis.gather(local_max)).amax(dim=0)  # a max is exact in any order
        partials = [row_sum(torch.exp(x[:, lo:hi] - row_max)) for lo, hi in slices]  # [R, 1] each
        total = tree_sum(axis.gather(tree_sum(partials)))
    lse = row_max + torch.log(total)
    return x - lse if full else (x.gather(-1, targets[:, None]) - lse)[:, 0]
