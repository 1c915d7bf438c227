"""DeepSeek-V4's routing (kernels/ops/router/ with scoring="sqrtsoftplus", topk/'s HASH): a row's
sqrt-softplus scores are the same bits alone and in batches, on one thread or two, and within a
float64 tolerance, while the fast router's follow the batch (F.softplus's vector and scalar loops:
negative control); hash routing weighs the table's experts as the float64 reference does."""
import torch

from gates.case_calls import intra_op_threads
from gates.compare import first_bit_difference
from gates.inputs import fresh_seed
from gates.reference import moe as ref_moe
from kernels.ops.router.consistent import router_consistent
from kernels.ops.router.fast import router_fast
from kernels.ops.topk import HASH

ROWS, HIDDEN, EXPERTS, TOP_K, SCALING = 37, 64, 16, 3, 1.5
TOLERANCE = 1e-5  # relative to max |score| or |weight|, vs float64


def _inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(ROWS, HIDDEN, generator=gen).to(torch.bfloat16),
            torch.randn(EXPERTS, HIDDEN, generator=gen) * 0.3)


def test_sqrt_softplus_scores_are_the_same_bits_in_any_batch():
    seed = fresh_seed()
    x, w = _inputs(seed)
    with intra_op_threads(2):
        whole = router_consistent(x, w, row_multiple=8, scoring="sqrtsoftplus")
    with intra_op_threads(1):
        for start, size in ((0, 1), (5, 3), (11, 17)):
            part = router_consistent(x[start:start + size], w, row_multiple=8, scoring="sqrtsoftplus")
            assert first_bit_difference(part, whole[start:start + size]) is None, (seed, start, size)
    expected = ref_moe.router(x, w, scoring="sqrtsoftplus")
    error = float((whole.double() - expected).abs().max() / expected.abs().max())
    print(f"seed {seed}: sqrt-softplus scores vs float64 {error:.2e} (tolerance {TOLERANCE:g})")
    assert error <= TOLERANCE


def test_fast_sqrt_softplus_scores_follow_the_batch():
    seed = fresh_seed()
    x, w = _inputs(seed)
    whole = router_fast(x, w, scoring="sqrtsoftplus")
    differing = sum(first_bit_difference(router_fast(x[r:r + 1], w, scoring="sqrtsoftplus")[0], whole[r]) is not None
                    for r in range(ROWS))
    print(f"seed {seed}: fast scores of {differing} of {ROWS} rows differ alone and in the batch")
    assert differing > 0


def test_hash_routing_weighs_the_tables_experts():
    seed = fresh_seed()
    gen = torch.Generator().manual_seed(seed)
    scores = torch.rand(ROWS, EXPERTS, generator=gen) + 0.01
    ids = torch.stack([torch.randperm(EXPERTS, generator=gen)[:TOP_K] for _ in range(ROWS)])  # the table's rows
    expected = ref_moe.routing_weights(scores, ids, SCALING)
    for variant, weigh in HASH.items():
        weights = weigh(scores, ids, scaling=SCALING)
        error = float((weights.double() - expected).abs().max() / expected.abs().max())
        print(f"seed {seed}: hash routing ({variant}) vs float64 {error:.2e}")
        assert weights.shape == (ROWS, TOP_K) and error <= TOLERANCE
    alone = HASH["consistent"](scores[:1], ids[:1], scaling=SCALING)
    assert first_bit_difference(alone[0], HASH["consistent"](scores, ids, scaling=SCALING)[0]) is None, seed
