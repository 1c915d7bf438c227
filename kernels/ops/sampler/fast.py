"""sampler.fast: as engines sample, truncation by one batched ascending sort (ties with the k-th
logit all kept) and a Gumbel-max draw from one stream keyed by the whole batch."""
import torch

from kernels.ops.sampler.forms import GOLDEN, _rows, _truncating_rows, gumbel_argmax, truncation_tensors


def _fast_truncated(x, params_list):
    """As engines truncate, all rows in one batched sort (ascending): top-k by the logit at
    rank V - k (ties with it all kept), then top-p drops the ascending prefix whose softmax
    mass is at most 1 - p (the best token always kept); dropped tokens -inf, in x (the
    sampler's own scaled copy)."""
    filtered = _truncating_rows(params_list)
    if not filtered:
        return x
    index = torch.tensor(filtered, device=x.device)
    top_k, top_p = truncation_tensors([params_list[i] for i in filtered], x.shape[1], x.device)
    sorted_x, order = torch.sort(x[index], dim=-1)
    threshold = sorted_x.gather(1, (x.shape[1] - top_k)[:, None])
    sorted_x = sorted_x.masked_fill(sorted_x < threshold, float("-inf"))
    cumulative = torch.softmax(sorted_x, dim=-1).cumsum(dim=-1)
    drop = (cumulative <= 1 - top_p[:, None]) & (top_p < 1.0)[:, None]
    drop[:, -1] = False
    x[index] = torch.empty_like(sorted_x).scatter_(1, order, sorted_x.masked_fill(drop, float("-inf")))
    return x


def fast_draw(x, greedy, keys, temperatures=None):
    """[B] tokens from scaled logits x (or raw logits and their temperatures [B]) as engines
    draw them: Gumbel-max from one stream keyed by the whole batch (the rows' keys summed, row
    r takes stream r of it), so a request's draw depends on what else is in the batch and where
    it sits. Tensors in, tensors out: a decode graph captures it."""
    batch_key = keys.sum(dtype=torch.int64)
    row_keys = batch_key * GOLDEN + torch.arange(keys.shape[0], dtype=torch.int64, device=keys.device)
    return gumbel_argmax(x, row_keys, greedy, temperatures)


def fast(logits, params_list, draw_indices):
    """As engines sample: torch.topk / sorted-softmax truncation, then fast_draw."""
    x, greedy, keys = _rows(logits, params_list, draw_indices)
    return fast_draw(_fast_truncated(x, params_list), greedy, keys)


# The variant's tensor form over scaled, truncated logits: what a decode graph captures
# (kernels/engine/graph_head.py).
fast.draw = fast_draw
