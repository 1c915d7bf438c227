"""Crafted gate inputs: values built so that the hazards a gate must cross are in them (exact
ties across the k-th place, E4M3 midpoints and signed zeros, block extremes that differ). The
gates count what they contain (gates/hazards.py) before they trust a pass.
"""
import torch

from gates.reference import quant as ref_quant


def tied_scores(gen, num_rows, num_experts, top_k):
    """Router scores and bias whose exact fp32 sum ties a group of 2-4 experts across the k-th
    place in every row (multiples of 1/256, so score + bias is exact)."""
    bias = torch.randint(-16, 17, (num_experts,), generator=gen).float() / 64
    keys = torch.empty(num_rows, num_experts)
    for row in range(num_rows):
        key = (torch.randperm(num_experts, generator=gen).float() * 3 + 100) / 256
        ranked = key.sort(descending=True).indices
        size = int(torch.randint(2, 5, (1,), generator=gen))
        first = int(torch.randint(max(0, top_k - size + 1), top_k, (1,), generator=gen))
        key[ranked[first:first + size]] = float(key[ranked[first]])
        keys[row] = key
    return keys - bias, bias


def sampler_inputs(gen, vocab_size, dtype, num_requests):
    """Logits on 6 levels (exact ties everywhere, the maximum included); mixed settings (the
    fields of kernels.ops.sampler.SamplingParams), own seeds."""
    logits = (torch.randint(0, 6, (num_requests, vocab_size), generator=gen).float() / 4).to(dtype)
    kinds = ({"temperature": 0.0}, {"temperature": 1.0}, {"temperature": 0.7, "top_k": 50},
             {"temperature": 1.0, "top_p": 0.9})
    params = [dict(kinds[i % len(kinds)], seed=int(torch.randint(2**62, (1,), generator=gen)))
              for i in range(num_requests)]
    return logits, params, [int(i) for i in torch.randint(0, 64, (num_requests,), generator=gen)]


def tied_top_logits(gen, num_rows, vocab, group, dtype):
    """(logits [R, V], the tied token ids [R, group]): each row's `group` best logits exactly
    equal (4.0), every other logit far below (randn - 8)."""
    logits = torch.randn(num_rows, vocab, generator=gen) - 8.0
    groups = torch.stack([torch.randperm(vocab, generator=gen)[:group] for _ in range(num_rows)])
    return logits.scatter_(1, groups, 4.0).to(dtype), groups


def fp8_crafted(gen, shape, scale, dtype):
    """E4M3 grid values and midpoints (times `scale`), random signs, +-0.0; every 128-wide
    block of every row holds its extreme, +-448*scale, then each row and each 128-column block
    is multiplied by its own power of two (distinct per column block): every granularity's
    scales differ from block to block and from the per-tensor one (a scale of the wrong
    granularity must show), while x / scale keeps the midpoints exact."""
    grid = ref_quant.e4m3_grid()
    pool = torch.cat([grid, (grid[:-1] + grid[1:]) / 2]) * scale
    x = pool[torch.randint(0, len(pool), shape, generator=gen)]
    x = torch.where(torch.rand(shape, generator=gen) < 0.5, -x, x)
    x[torch.rand(shape, generator=gen) < 0.02] = -0.0
    x[:, ::128] = 448.0 * scale * torch.sign(torch.randn(shape[0], 1, generator=gen))
    num_blocks = -(-shape[1] // 128)
    row_factor = 2.0 ** torch.randint(-2, 2, (shape[0], 1), generator=gen)
    block_factor = 2.0 ** (torch.randperm(max(4, num_blocks), generator=gen)[:num_blocks] - 1)
    return (x * row_factor * block_factor.repeat_interleave(128)[:shape[1]]).to(dtype)


def distinct_fp8_scales(x, granularity) -> int:
    """How many different FP8 scales the reference gives x's groups (1 for a per-tensor scale)."""
    return int(ref_quant.fp8_quantize(x, granularity).scales.unique().numel())
