"""Token sampler: temperature, top-k, top-p, seeded per request; greedy at temperature 0.

Consistency: token t's uniform is a counter-based hash of (request seed, t) (race_uniforms), so a
request samples the same tokens whatever shares its batch or when it runs, on the logits' device.
Top-k keeps the k best by (logit desc, token id asc), top-p the shortest prefix of that order with
fp32 cumulative probability >= p; the draw is Gumbel-max, ties to the lowest id. Log-probs are raw:
of the whole distribution at the temperature, before truncation. No float64 reference: the choice
rules are tested (tests/ops/test_sampler.py).
"""
from kernels.ops.sampler import consistent, fast
from kernels.ops.sampler.forms import SamplingParams

VARIANTS = {"fast": fast.fast, "consistent": consistent.consistent}
CALL_KEYWORDS = frozenset()
# SamplingParams is the family's interface (kernels/engine/request.py; gates/workload.py, also run on older trees)
__all__ = ["CALL_KEYWORDS", "SamplingParams", "VARIANTS"]
