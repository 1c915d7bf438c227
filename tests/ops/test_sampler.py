"""The consistent sampler (kernels/ops/sampler/), with the fast one as negative control: a
request draws the same token whatever shares its batch; top-k ties keep the lowest token ids,
top-p keeps the prefix that reaches p; race_uniforms are the Python-integer hash and uniform;
draws follow softmax(logits / T). Run with `python -m pytest tests/ops/test_sampler.py -s` to
see the negative-control counts.
"""
import random

import torch

from gates.compare import assert_bitwise_equal
from kernels.ops.reduction import row_sum
from kernels.ops.sampler import SamplingParams
from kernels.ops.sampler.consistent import _kept_mask
from kernels.ops.sampler.consistent import consistent as sampler_consistent
from kernels.ops.sampler.fast import fast as sampler_fast
from kernels.ops.sampler.forms import mix_seed, race_uniforms


def _randn(generator, shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(shape, generator=generator) * scale).to(dtype)


REQUESTS = (SamplingParams(temperature=0.0, seed=11), SamplingParams(temperature=1.0, seed=12),
            SamplingParams(temperature=0.7, seed=13), SamplingParams(temperature=1.0, top_k=20, seed=14),
            SamplingParams(temperature=1.3, top_p=0.9, seed=15),
            SamplingParams(temperature=0.8, top_k=50, top_p=0.8, seed=16))


def _tokens_in_company(sample, logits, draw_indices, generator):
    """Each request's token drawn alone, and among shuffled random other rows."""
    num_requests, vocab = logits.shape
    others = _randn(generator, (5, vocab), scale=2.0)
    other_params = [SamplingParams(temperature=1.0, seed=100 + i) for i in range(5)]
    order = torch.randperm(num_requests + 5, generator=generator).tolist()
    rows = torch.cat([logits, others])[order]
    params = [(list(REQUESTS) + other_params)[i] for i in order]
    indices = (draw_indices.tolist() + [7] * 5)
    mixed = sample(rows, params, [indices[i] for i in order])
    by_request = torch.empty(num_requests, dtype=torch.long)
    for position, i in enumerate(order):
        if i < num_requests:
            by_request[i] = mixed[position]
    alone = torch.cat([sample(logits[i:i + 1], [REQUESTS[i]], draw_indices[i:i + 1])
                       for i in range(num_requests)])
    return alone, by_request


def test_sampler_consistent_ignores_batch_company(fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    for trial in range(10):
        logits = _randn(generator, (len(REQUESTS), 4096), scale=2.0)
        draw_indices = torch.randint(0, 1000, (len(REQUESTS),), generator=generator)
        batch = sampler_consistent(logits, list(REQUESTS), draw_indices)
        alone, mixed = _tokens_in_company(sampler_consistent, logits, draw_indices, generator)
        assert_bitwise_equal(alone, batch, f"sampler.consistent alone vs batch, trial {trial}, seed {fresh_seed}")
        assert_bitwise_equal(mixed, batch, f"sampler.consistent shuffled with others, trial {trial}, seed {fresh_seed}")


def test_sampler_fast_depends_on_batch_company(fresh_seed):
    """Negative control: one generator seeded from the whole batch."""
    generator = torch.Generator().manual_seed(fresh_seed)
    num_trials, num_differing = 10, 0
    for _ in range(num_trials):
        logits = _randn(generator, (len(REQUESTS), 4096), scale=2.0)
        draw_indices = torch.randint(0, 1000, (len(REQUESTS),), generator=generator)
        alone, mixed = _tokens_in_company(sampler_fast, logits, draw_indices, generator)
        num_differing += int((alone != mixed).sum())
    print(f"\nsampler.fast: {num_differing}/{num_trials * len(REQUESTS)} request tokens change with company")
    assert num_differing > 0, f"sampler.fast never changed a token over {num_trials} trials, seed {fresh_seed}"


def _tied_row(generator, vocab, num_tied, tie_value):
    """Logits below tie_value, with `num_tied` random token ids set exactly to tie_value."""
    row = _randn(generator, (vocab,)) - 6.0
    tied = torch.randperm(vocab, generator=generator)[:num_tied].sort().values
    row[tied] = tie_value
    return row, tied


def _count_ties(row, value):
    return int((row.view(torch.int32) == torch.tensor(value).view(torch.int32)).sum())


def test_sampler_top_k_ties_keep_lowest_token_ids(fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    row, tied = _tied_row(generator, 1000, num_tied=6, tie_value=2.0)
    top = int(torch.nonzero(row < 2.0)[0])
    row[top] = 2.25  # one clear winner, then the tie straddles the top-k cut
    params = SamplingParams(temperature=1.0, top_k=4, seed=fresh_seed)
    kth = row.sort(descending=True).values[params.top_k - 1]
    num_tied, num_at_least_kth = _count_ties(row, float(kth)), int((row >= kth).sum())
    assert num_tied >= 2 and num_at_least_kth > params.top_k, (
        f"crafted tie missing: {num_tied} logits equal the k-th, {num_at_least_kth} >= it, seed {fresh_seed}")
    kept = {top} | set(tied[:params.top_k - 1].tolist())
    drawn = sampler_consistent(row.expand(400, -1), [params] * 400, torch.arange(400))
    assert set(drawn.tolist()) == kept, (
        f"sampler.consistent top_k={params.top_k} with {num_tied} tied: drew {sorted(set(drawn.tolist()))}, "
        f"the lowest tied ids give {sorted(kept)}; seed {fresh_seed}")
    fast_drawn = set(sampler_fast(row.expand(400, -1), [params] * 400, torch.arange(400)).tolist())
    print(f"\nsampler.fast top_k={params.top_k}, {num_tied} tied: drew {sorted(fast_drawn)}, rule keeps {sorted(kept)}")
    assert fast_drawn - kept, f"negative control: sampler.fast kept only the lowest tied ids, seed {fresh_seed}"
    greedy_row, greedy_tied = _tied_row(generator, 1000, num_tied=5, tie_value=3.0)
    assert _count_ties(greedy_row, float(greedy_row.max())) == 5, f"greedy tie missing, seed {fresh_seed}"
    greedy = sampler_consistent(greedy_row[None], [SamplingParams(temperature=0.0)], torch.zeros(1, dtype=torch.long))
    assert int(greedy) == int(greedy_tied[0]), (
        f"greedy over tied ids {greedy_tied.tolist()} chose {int(greedy)}, seed {fresh_seed}")


def test_sampler_top_p_keeps_the_prefix_that_reaches_p(fresh_seed):
    """Top-p (after top-k) keeps the first n tokens of the unique order (logit descending, id
    ascending), n the count of tokens whose fp32 mass strictly before them is below p: counted
    on the device (no host sync a row), checked against the count taken in Python, on rows
    with tied logits."""
    generator, rng = torch.Generator().manual_seed(fresh_seed), random.Random(fresh_seed)
    num_tied_rows = 0
    for _ in range(60):
        row = (torch.randn(300, generator=generator) * rng.choice([0.5, 2.0]) * 4).round() / 4  # ties
        num_tied_rows += int(row.unique().numel() < row.numel())
        params = SamplingParams(temperature=1.0, top_k=rng.choice([0, 5, 40]),
                                top_p=rng.choice([0.3, 0.8, 0.95, 1.0]))
        order = sorted(range(300), key=lambda t: (-float(row[t]), t))
        k = params.top_k or 300
        probs = torch.zeros(300)
        probs[:k] = torch.exp(row[order[:k]] - row[order[0]])  # zeros past the top-k
        probs = probs / row_sum(probs)
        before = (torch.cumsum(probs, dim=0) - probs).tolist()[:k]
        count = sum(mass < params.top_p for mass in before) if params.top_p < 1 else k
        expected = set(order[:count])
        kept = set(torch.nonzero(_kept_mask(row, params))[:, 0].tolist())
        assert kept == expected, (
            f"{params}: kept {sorted(kept)[:8]}..., rule {sorted(expected)[:8]}..., seed {fresh_seed}")
    assert num_tied_rows > 0, f"no row held a tie, seed {fresh_seed}"


def _python_draw(key: int, token: int) -> float:
    """race_uniforms' formula in Python integers (the reference for torch's wrapping int64)."""
    z = (key + (token + 1) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    z ^= z >> 31
    return ((z >> 41) + 0.5) * 2.0 ** -23


def test_race_uniforms_are_the_hash_and_uniform(fresh_seed):
    """The consistent sampler's uniforms: torch's int64 arithmetic gives the Python-integer
    hash exactly (keys of both signs), and their mean is 1/2."""
    rng = random.Random(fresh_seed)
    keys = [mix_seed(rng.randrange(2 ** 32), rng.randrange(10 ** 6)) for _ in range(3)] + [0, 2 ** 63 - 1]
    uniforms = race_uniforms(torch.tensor(keys, dtype=torch.int64), 5000)
    for b, key in enumerate(keys):
        for token in (0, 1, rng.randrange(5000), 4999):
            assert float(uniforms[b, token]) == _python_draw(key, token), (
                f"key {key} token {token}: {float(uniforms[b, token])} vs {_python_draw(key, token)}, "
                f"seed {fresh_seed}")
    mean = float(uniforms.double().mean())
    sd = (1 / 12) ** 0.5 / uniforms.numel() ** 0.5
    print(f"\nrace uniforms: mean {mean:.5f} over {uniforms.numel()} (1/2, sd of the mean {sd:.5f})")
    assert abs(mean - 0.5) < 5 * sd, f"mean {mean}, seed {fresh_seed}"


def test_sampler_consistent_draws_follow_the_distribution(fresh_seed):
    """Token frequencies over 8000 draw indices match softmax(logits / T) within 5 sigma."""
    generator = torch.Generator().manual_seed(fresh_seed)
    logits = _randn(generator, (8,), scale=1.5)
    params = SamplingParams(temperature=0.8, seed=fresh_seed)
    drawn = sampler_consistent(logits.expand(8000, -1), [params] * 8000, torch.arange(8000))
    counts = torch.bincount(drawn, minlength=8).double()
    expected = torch.softmax(logits.double() / 0.8, dim=0) * 8000
    sigma = (expected * (1 - expected / 8000)).sqrt()
    worst = float(((counts - expected).abs() / sigma).max())
    print(f"\nsampler.consistent: worst bin {worst:.2f} sigma from softmax(x/T) over 8000 draws")
    assert worst < 5, f"counts {counts.tolist()} vs expected {expected.tolist()}, seed {fresh_seed}"
