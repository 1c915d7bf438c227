"""Token sampler: temperature, top-k, top-p, seeded per request; greedy at temperature 0.

Consistency: the consistent sampler draws each token from its own generator, seeded by
(request seed, index of the token in the request), so a request samples the same tokens
whatever else shares the batch or when it was scheduled. Top-k keeps the k best by the
unique key (logit descending, token id ascending); top-p keeps the shortest prefix of that
order whose fp32 cumulative probability reaches p; the draw is an exponential race
argmax(p_i / e_i) whose ties go to the lowest token id (torch.argmax returns the first).
Log-probs reported on both sides are of the whole distribution at the request's temperature
(before top-k/top-p), as engines report "raw" log-probs: the RL policy is the temperature-
scaled model, the truncation is part of the behaviour, not of pi_old.
No float64 reference: the choice rules themselves are tested (tests/test_ops_invariance.py).
"""
from dataclasses import dataclass

import torch

from kernels.ops.reduction import row_sum


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
    z = (seed * 0x9E3779B97F4A7C15 + index + 1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) & 0x7FFFFFFFFFFFFFFF


def _filtered_probs(row, params: SamplingParams):
    """fp32 probabilities after temperature, top-k and top-p, in unique-key order."""
    x = row.float() / params.temperature
    order = torch.sort(x, descending=True, stable=True).indices  # ties: lower id first
    if params.top_k > 0:
        order = order[:params.top_k]
    sorted_x = x[order]
    probs = torch.exp(sorted_x - sorted_x[0])
    probs = probs / row_sum(probs)
    if params.top_p < 1.0:
        before = torch.cumsum(probs, dim=0) - probs  # mass strictly before each token
        keep = int((before < params.top_p).sum())
        order, probs = order[:keep], probs[:keep]
    return order, probs


def fast(logits, params_list, draw_indices):
    """One generator for the whole batch, seeded from all its rows, so a request's draw
    depends on what else is in the batch and in which order; torch.topk ties."""
    batch_seed = sum(mix_seed(p.seed, int(i)) for p, i in zip(params_list, draw_indices))
    generator = torch.Generator().manual_seed(batch_seed & 0x7FFFFFFFFFFFFFFF)
    tokens = []
    for row, params in zip(logits, params_list):
        if params.temperature == 0:
            tokens.append(int(row.argmax()))
            continue
        x = row.float() / params.temperature
        if 0 < params.top_k < x.numel():
            threshold = torch.topk(x, params.top_k).values[-1]
            x = x.masked_fill(x < threshold, float("-inf"))
        probs = torch.softmax(x, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            drop = torch.cumsum(sorted_probs, dim=0) - sorted_probs >= params.top_p
            probs = probs.index_fill(0, order[drop], 0.0)
        tokens.append(int(torch.multinomial(probs.cpu(), 1, generator=generator)))  # CPU generator
    return torch.tensor(tokens, dtype=torch.long, device=logits.device)


def consistent(logits, params_list, draw_indices):
    """Per-request, per-index draws; independent of the batch."""
    tokens = []
    for row, params, index in zip(logits, params_list, draw_indices):
        if params.temperature == 0:
            tokens.append(int(row.float().argmax()))
            continue
        order, probs = _filtered_probs(row, params)
        generator = torch.Generator().manual_seed(mix_seed(params.seed, int(index)))
        # drawn on the CPU generator whatever the device: the same stream on every machine
        race = torch.empty(probs.shape[0]).exponential_(generator=generator).to(probs.device)
        tokens.append(int(order[torch.argmax(probs / race)]))
    return torch.tensor(tokens, dtype=torch.long, device=logits.device)
