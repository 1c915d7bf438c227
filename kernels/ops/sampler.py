"""Token sampler: temperature, top-k, top-p, seeded per request; greedy at temperature 0.

Consistency: token t's uniform is a counter-based hash of (request seed, t) (race_uniforms), so a
request samples the same tokens whatever shares its batch or when it runs, on the logits' device.
Top-k keeps the k best by (logit desc, token id asc), top-p the shortest prefix of that order with
fp32 cumulative probability >= p; the draw is Gumbel-max, ties to the lowest id. Log-probs are raw:
of the whole distribution at the temperature, before truncation. No float64 reference: the choice
rules are tested (tests/ops/test_sampler.py).
"""
from dataclasses import dataclass

import torch

from kernels.ops.logprob import scaled
from kernels.ops.reduction import row_prefix_sum, row_sum
from kernels.ops.splitmix import SPLITMIX64
from kernels.ops.transfer import to_device


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-request sampling settings."""

    temperature: float = 1.0
    """0 means greedy."""
    top_k: int = 0
    """0 keeps the whole vocabulary."""
    top_p: float = 1.0
    """1.0 keeps the whole vocabulary."""
    seed: int = 0
    """Per-request seed; with the token index it fixes every draw."""

    def __post_init__(self):
        if not self.temperature >= 0:
            raise ValueError(f"temperature: must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k: must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p: must be in (0, 1], got {self.top_p}")

    @property
    def logprob_temperature(self) -> float:
        """Temperature of the distribution whose log-probs both sides report (1 if greedy)."""
        return self.temperature if self.temperature > 0 else 1.0


def mix_seed(seed: int, index: int) -> int:
    """SplitMix64 of (seed, index): neighbouring indices get unrelated streams."""
    golden, mix_1, mix_2 = SPLITMIX64
    z = (seed * golden + index + 1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * mix_1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * mix_2) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) & 0x7FFFFFFFFFFFFFFF


def _wrapping(value: int) -> int:
    """A 64-bit constant as the int64 with the same bits (torch multiplies int64 wrapping)."""
    return value - (1 << 64) if value >= 1 << 63 else value


GOLDEN, MIX_1, MIX_2 = (_wrapping(c) for c in SPLITMIX64)


def _shift_right(z, bits: int):
    """Logical right shift of int64 bit patterns (torch's >> is arithmetic)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def race_uniforms(keys, vocab: int):
    """[B, V] fp32 uniforms in (0, 1): token t of row b gets the top 23 bits of
    SplitMix64(keys[b] + (t + 1) * golden), + 1/2, over 2^23 (24 significant bits: exact in
    fp32). Integer ops only, so a row's uniforms are the same bits whatever the batch, on
    any device."""
    tokens = torch.arange(1, vocab + 1, dtype=torch.int64, device=keys.device)
    z = keys[:, None] + tokens[None, :] * GOLDEN
    z = (z ^ _shift_right(z, 30)) * MIX_1
    z = (z ^ _shift_right(z, 27)) * MIX_2
    z = z ^ _shift_right(z, 31)
    return (_shift_right(z, 41).to(torch.float32) + 0.5) * 2.0 ** -23


def gumbel_argmax(x, keys, greedy=None):
    """[B] argmax_t (x_t + G_t), G_t = -log(-log(u_t)): a draw from softmax(x) (Gumbel-max);
    ties go to the lowest token id; rows where `greedy` [B] bool is set take argmax_t x_t.
    On CUDA two Triton passes (kernels/ops/sampler_triton.py: the hash, the noise and the
    argmax fused over vocabulary chunks, greedy rows in the same launch, then a merge per row)."""
    if x.device.type == "cuda":
        from kernels.ops import sampler_triton
        return sampler_triton.gumbel_argmax(x, keys, greedy)
    drawn = (x - torch.log(-torch.log(race_uniforms(keys, x.shape[1])))).argmax(dim=-1)
    return drawn if greedy is None else torch.where(greedy, x.argmax(dim=-1), drawn)


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


def truncation_tensors(params_list, vocab: int, device):
    """(top_k [R] int64 with V for none, top_p [R] fp32) of the rows' settings."""
    top_k = torch.tensor([p.top_k if 0 < p.top_k < vocab else vocab for p in params_list], dtype=torch.int64)
    top_p = torch.tensor([p.top_p for p in params_list], dtype=torch.float32)
    return to_device(top_k, device), to_device(top_p, device)


def row_tensors(params_list, draw_indices, device):
    """The sampler's per-row inputs as tensors: temperatures [B] fp32 (1 for greedy rows),
    greedy [B] bool and keys [B] int64 (mix_seed of seed and draw index)."""
    if len(params_list) != len(draw_indices):
        raise ValueError(f"sampler: {len(params_list)} params, {len(draw_indices)} draw indices")
    temperatures = torch.tensor([p.logprob_temperature for p in params_list], dtype=torch.float32)
    greedy = torch.tensor([p.temperature == 0 for p in params_list])
    keys = torch.tensor([mix_seed(p.seed, int(i)) for p, i in zip(params_list, draw_indices)], dtype=torch.int64)
    return tuple(to_device(t, device) for t in (temperatures, greedy, keys))


def truncates(params_list) -> bool:
    """Whether any row keeps less than its whole vocabulary (top-k or top-p)."""
    return any(p.temperature > 0 and (p.top_k > 0 or p.top_p < 1.0) for p in params_list)


def _rows(logits, params_list, draw_indices):
    if logits.shape[0] != len(params_list):
        raise ValueError(f"sampler: {logits.shape[0]} rows, {len(params_list)} params")
    temperatures, greedy, keys = row_tensors(params_list, draw_indices, logits.device)
    return scaled(logits, temperatures), greedy, keys


def _truncating_rows(params_list) -> list:
    return [i for i, p in enumerate(params_list) if truncates([p])]


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


def fast_draw(x, greedy, keys):
    """[B] tokens from scaled logits x as engines draw them: Gumbel-max from one stream keyed
    by the whole batch (the rows' keys summed, row r takes stream r of it), so a request's
    draw depends on what else is in the batch and where it sits. Tensors in, tensors out:
    a decode graph captures it."""
    batch_key = keys.sum(dtype=torch.int64)
    row_keys = batch_key * GOLDEN + torch.arange(keys.shape[0], dtype=torch.int64, device=keys.device)
    return gumbel_argmax(x, row_keys, greedy)


def fast(logits, params_list, draw_indices):
    """As engines sample: torch.topk / sorted-softmax truncation, then fast_draw."""
    x, greedy, keys = _rows(logits, params_list, draw_indices)
    return fast_draw(_fast_truncated(x, params_list), greedy, keys)


def consistent_draw(x, greedy, keys):
    """[B] tokens from scaled logits x: Gumbel-max with each row's own key, greedy rows by an
    exact argmax (ties to the lowest id). Tensors in, tensors out: a decode graph captures it."""
    return gumbel_argmax(x, keys, greedy)


def consistent(logits, params_list, draw_indices):
    """Per-request, per-index draws, batched; independent of the batch by construction:
    elementwise ops, an exact row argmax, per-row keys."""
    x, greedy, keys = _rows(logits, params_list, draw_indices)
    return consistent_draw(_truncated(x, params_list), greedy, keys)


# Each variant's tensor form over scaled, truncated logits: what a decode graph captures
# (kernels/engine/graph_head.py); a variant without one samples after the replay.
fast.draw = fast_draw
consistent.draw = consistent_draw
