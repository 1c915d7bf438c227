"""sampler.consistent: top-k and top-p by the unique key (logit desc, token id asc), the top-p mass
in fp32 by fixed-order sums (kernels/ops/reduction.py), and a Gumbel-max draw with each row's own
key, so a request samples the same tokens whatever shares its batch or when it runs."""
import torch

from kernels.ops.reduction import row_prefix_sum, row_sum
from kernels.ops.sampler.forms import SamplingParams, _rows, _truncating_rows, gumbel_argmax, truncation_tensors


def kept_masks(x, top_k, top_p):
    """[R, V] bool: the tokens top-k and top-p keep of rows of scaled logits x [R, V], with
    top_k [R] (V keeps all) and top_p [R] fp32 (1 keeps all), by the unique key (logit
    descending, token id ascending, so any correct stable sort gives the same order, alone
    or in a batch): the first top_k tokens of that order, and of those the first n, n the
    count whose fp32 mass strictly before them (exp(x - max) over the top-k, divided by
    their row_sum, summed by row_prefix_sum) is below top_p."""
    vocab = x.shape[-1]
    sorted_x, order = torch.sort(x, dim=-1, descending=True, stable=True)  # ties: lower id first
    rank = torch.arange(vocab, device=x.device)
    in_k = rank[None, :] < top_k[:, None]
    probs = torch.where(in_k, torch.exp(sorted_x - sorted_x[:, :1]), 0.0)
    probs = probs / row_sum(probs)
    before = row_prefix_sum(probs) - probs  # mass strictly before each token
    count = torch.where(top_p < 1.0, (in_k & (before < top_p[:, None])).sum(dim=-1), top_k)  # on the device
    return torch.zeros_like(x, dtype=torch.bool).scatter_(1, order, rank[None, :] < count[:, None])


def _kept_mask(x, params: SamplingParams):
    """[V] bool: kept_masks of one row of scaled logits x under one request's settings."""
    top_k, top_p = truncation_tensors([params], x.shape[-1], x.device)
    return kept_masks(x[None], top_k, top_p)[0]


def _truncated(x, params_list):
    """x with the tokens top-k / top-p drop set to -inf (rows without them untouched): every
    truncating row in one kept_masks call."""
    filtered = _truncating_rows(params_list)
    if not filtered:
        return x
    index = torch.tensor(filtered, device=x.device)
    rows = x[index]
    kept = kept_masks(rows, *truncation_tensors([params_list[i] for i in filtered], x.shape[1], x.device))
    x = x.clone()
    x[index] = rows.masked_fill(~kept, float("-inf"))
    return x


def consistent_draw(x, greedy, keys, temperatures=None):
    """[B] tokens from scaled logits x (or raw logits and their temperatures [B]): Gumbel-max
    with each row's own key, greedy rows by an exact argmax (ties to the lowest id). Tensors
    in, tensors out: a decode graph captures it."""
    return gumbel_argmax(x, keys, greedy, temperatures)


def consistent(logits, params_list, draw_indices):
    """Per-request, per-index draws, batched; independent of the batch by construction:
    elementwise ops, an exact row argmax, per-row keys."""
    x, greedy, keys = _rows(logits, params_list, draw_indices)
    return consistent_draw(_truncated(x, params_list), greedy, keys)


# The variant's tensor form over scaled, truncated logits: what a decode graph captures
# (kernels/engine/graph_head.py); a variant without one samples after the replay.
consistent.draw = consistent_draw
