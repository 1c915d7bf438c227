"""The sampler's shared parts: the per-request settings (SamplingParams), the counter-based
hash of (request seed, token) and its uniforms, the Gumbel-max draw, and the per-row tensors
both variants build from the settings (fast.py and consistent.py differ in truncation and keys).
"""
from dataclasses import dataclass

import torch

from kernels.ops.logprob.forms import scaled
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


def gumbel_argmax(x, keys, greedy=None, temperatures=None):
    """[B] argmax_t (x_t + G_t), G_t = -log(-log(u_t)): a draw from softmax(x) (Gumbel-max);
    ties go to the lowest token id; rows where `greedy` [B] bool is set take argmax_t x_t.
    temperatures [B]: x is the raw logits, scaled(x, temperatures) first (on CUDA inside the
    kernel, no copy written). On CUDA two Triton passes (kernels/ops/sampler/triton.py: the
    hash, the noise and the argmax fused over vocabulary chunks, greedy rows in the same launch,
    then a merge per row)."""
    if x.device.type == "cuda":
        import kernels.ops.sampler.triton as sampler_triton
        return sampler_triton.gumbel_argmax(x, keys, greedy, temperatures=temperatures)
    if temperatures is not None:
        x = scaled(x, temperatures)
    drawn = (x - torch.log(-torch.log(race_uniforms(keys, x.shape[1])))).argmax(dim=-1)
    return drawn if greedy is None else torch.where(greedy, x.argmax(dim=-1), drawn)


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
