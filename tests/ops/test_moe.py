"""The Nemotron-H MoE ops (kernels/ops/router/, topk/, expert_gemm/, moe_combine/, relu2_mlp/):
exact ties, batch invariance, the float64 reference, and the routing weight applied once. The
fast variants are the negative controls.
Run with `python -m pytest tests/ops/test_moe.py -s` to see the measured counts and errors.
"""
from types import SimpleNamespace

import pytest
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from gates.crafted import tied_scores
from gates.reference import moe as ref_moe
from kernels.ops.expert_gemm.consistent import experts_consistent
from kernels.ops.expert_gemm.fast import experts_fast
from kernels.ops.moe_combine.consistent import combine_consistent
from kernels.ops.moe_combine.fast import combine_fast
from kernels.ops.relu2_mlp.consistent import shared_consistent
from kernels.ops.relu2_mlp.fast import shared_fast
from kernels.ops.router.consistent import router_consistent
from kernels.ops.router.fast import router_fast
from kernels.ops.topk.consistent import topk_consistent
from kernels.ops.topk.fast import topk_fast

HIDDEN, NUM_EXPERTS, WIDTH, SHARED_WIDTH = 64, 8, 32, 64
SCALING = 2.5
ROW_MULTIPLE = 8
SIZES = (1, 3, 7, 16, 64)
NUM_TOKENS = 64
# max |out - ref| / max |ref| against the float64 reference. tests/ops/test_ops_reference.py allows
# 1e-2 for one bf16 op; a MoE output passes four bf16 roundings (up-projection, relu², slot
# output, the sum), and 1e-2 failed about 1 seed in 100 (measured: max 1.31e-2 over 301 seeds,
# both contracts). What catches a routing weight applied twice or never is the fitted factor
# of test_routing_weight_is_applied_once (1e-2 on a least-squares factor, not a maximum).
TOLERANCE = 2e-2


def _params(generator, identical_experts=False, shared_scale=1.0, dtype=torch.bfloat16):
    def randn(shape, scale):
        return (torch.randn(shape, generator=generator) * scale).to(dtype)
    up, down = randn((NUM_EXPERTS, WIDTH, HIDDEN), HIDDEN ** -0.5), randn((NUM_EXPERTS, HIDDEN, WIDTH), WIDTH ** -0.5)
    if identical_experts:
        up, down = up[:1].expand_as(up).contiguous(), down[:1].expand_as(down).contiguous()
    return SimpleNamespace(
        router=randn((NUM_EXPERTS, HIDDEN), HIDDEN ** -0.5),
        bias=(torch.randn(NUM_EXPERTS, generator=generator) * 0.1).float(),
        up=up, down=down,
        shared_up=randn((SHARED_WIDTH, HIDDEN), HIDDEN ** -0.5),
        shared_down=randn((HIDDEN, SHARED_WIDTH), SHARED_WIDTH ** -0.5) * shared_scale)


def moe_consistent(x, p, top_k, scaling=SCALING):
    scores = router_consistent(x, p.router, row_multiple=ROW_MULTIPLE)
    ids, weights = topk_consistent(scores, p.bias, top_k=top_k, scaling=scaling)
    slots = experts_consistent(x, ids, weights, p.up, p.down, row_multiple=ROW_MULTIPLE)
    shared = shared_consistent(x, p.shared_up, p.shared_down, row_multiple=ROW_MULTIPLE)
    return combine_consistent(slots, ids, weights, shared)


def moe_fast(x, p, top_k, scaling=SCALING):
    ids, weights = topk_fast(router_fast(x, p.router), p.bias, top_k=top_k, scaling=scaling)
    weighted = experts_fast(x, ids, weights, p.up, p.down)
    return combine_fast(weighted, ids, weights, shared_fast(x, p.shared_up, p.shared_down))


def _reference(x, p, top_k, scaling=SCALING, ids=None):
    return ref_moe.moe(x, p.router, p.bias, p.up, p.down, p.shared_up, p.shared_down,
                       top_k=top_k, scaling=scaling, ids=ids)


def _count_straddling_ties(key, top_k):
    """Rows where experts with a key equal to the k-th key are both in and out of the top k."""
    kth = key.sort(dim=-1, descending=True).values[:, top_k - 1:top_k]
    above, equal = (key > kth).sum(dim=-1), (key == kth).sum(dim=-1)
    return int(((above + equal > top_k) & (equal >= 2)).sum())


def _rule(key, top_k):
    """The unique key in plain Python: key descending, expert id ascending."""
    return torch.tensor([sorted(range(len(row)), key=lambda e: (-row[e], e))[:top_k] for row in key.tolist()])


@pytest.mark.parametrize("top_k", [2, 4])
def test_exact_ties_go_to_the_lowest_id_whatever_the_batch(top_k, fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    scores, bias = tied_scores(generator, NUM_TOKENS, NUM_EXPERTS, top_k)
    key = scores + bias
    num_ties = _count_straddling_ties(key, top_k)
    assert num_ties > 0, "the crafted input holds no tie across the k-th place"
    expected = _rule(key, top_k)
    ids, weights = topk_consistent(scores, bias, top_k=top_k, scaling=SCALING)
    assert torch.equal(ids, expected), "consistent topk broke a tie other than by the lowest id"
    ref_weights = ref_moe.routing_weights(scores, expected, SCALING)  # the unbiased scores
    assert float((weights.double() - ref_weights).abs().max()) <= 1e-6 * SCALING
    fast_differs = fast_set_differs = 0
    for size in SIZES:
        order = torch.randperm(NUM_TOKENS, generator=generator)  # another composition and order
        for rows in order.split(size):
            got_ids, got_weights = topk_consistent(scores[rows], bias, top_k=top_k, scaling=SCALING)
            assert torch.equal(got_ids, ids[rows]), f"ids of rows {rows.tolist()} in a batch of {size}"
            assert_bitwise_equal(got_weights, weights[rows], f"weights in a batch of {size}")
            fast_ids = topk_fast(scores[rows], bias, top_k=top_k, scaling=SCALING)[0]
            fast_differs += int((fast_ids != expected[rows]).any(dim=-1).sum())
            fast_set_differs += int((fast_ids.sort().values != expected[rows].sort().values).any(dim=-1).sum())
    print(f"\ntop_k={top_k}: {num_ties}/{NUM_TOKENS} rows tie across the k-th place; "
          f"torch.topk chose another set or order in {fast_differs}/{NUM_TOKENS * len(SIZES)} row-batches "
          f"(another set in {fast_set_differs})")
    assert fast_differs > 0, "negative control: torch.topk broke every tie like the unique key"


def _invariance_failures(forward, x, p, top_k, generator):
    """(token, batch size) pairs whose output differs from the token's row in the whole batch,
    each token recomputed among fresh random tokens at a random place, in every size of SIZES."""
    whole = forward(x, p, top_k)
    failures = []
    for size in SIZES:
        per_batch = (size + 1) // 2
        for tokens in torch.arange(len(x)).split(per_batch):
            others = torch.randn(size - len(tokens), HIDDEN, generator=generator).to(x.dtype)
            batch = torch.cat([x[tokens], others])
            place = torch.randperm(size, generator=generator)
            out = forward(batch[place], p, top_k)[place.argsort()]
            failures += [(int(t), size) for i, t in enumerate(tokens)
                         if first_bit_difference(out[i], whole[t]) is not None]
    return failures


@pytest.mark.parametrize("dtype, top_k", [(torch.bfloat16, 2), (torch.bfloat16, 4), (torch.float32, 4)])
def test_moe_rows_are_batch_invariant(dtype, top_k, fresh_seed):
    """bf16 is the model's dtype; fp32 activations show GEMM differences a bf16 rounding hides,
    so there the fast path must change rows (the negative control)."""
    generator = torch.Generator().manual_seed(fresh_seed)
    p = _params(generator, dtype=dtype)
    x = torch.randn(NUM_TOKENS // 4, HIDDEN, generator=generator).to(dtype)
    failures = _invariance_failures(moe_consistent, x, p, top_k, generator)
    assert not failures, f"consistent MoE rows changed with the batch: (token, size) {failures[:8]}"
    fast_failures = _invariance_failures(moe_fast, x, p, top_k, generator)
    fast_vs_consistent = first_bit_difference(moe_fast(x, p, top_k), moe_consistent(x, p, top_k))
    print(f"\n{dtype}, top_k={top_k}: fast path changed {len(fast_failures)}/{len(x) * len(SIZES)} "
          f"(token, batch size) rows, sizes {sorted({s for _, s in fast_failures})}; "
          f"fast vs consistent: {fast_vs_consistent}")
    assert fast_vs_consistent is not None, "negative control: the fast path equals the consistent one"
    if dtype == torch.float32:
        assert fast_failures, "negative control: the fast path kept every row's bits in fp32"


def test_router_scores_are_batch_invariant(fresh_seed):
    """fp32 scores show what the bf16 MoE output hides: the fast router's torch.sigmoid rounds
    a row in the vector body and in the scalar tail differently (negative control)."""
    generator = torch.Generator().manual_seed(fresh_seed)
    p = _params(generator)
    x = torch.randn(NUM_TOKENS // 2, HIDDEN, generator=generator).to(torch.bfloat16)
    consistent = _invariance_failures(
        lambda x, p, _: router_consistent(x, p.router, row_multiple=ROW_MULTIPLE), x, p, 0, generator)
    assert not consistent, f"consistent router rows changed with the batch: (token, size) {consistent[:8]}"
    fast = _invariance_failures(lambda x, p, _: router_fast(x, p.router), x, p, 0, generator)
    print(f"\nrouter: fast scores changed in {len(fast)}/{len(x) * len(SIZES)} (token, batch size) rows")
    assert fast, "negative control: torch.sigmoid and the plain GEMM kept every row's bits"


def _relative_error(out, ref):
    return float((out.double() - ref).abs().max() / ref.abs().max())


def _reference_for(x, p, top_k, scaling, ids):
    """The reference on the tested side's choice; a differing choice must be a near tie."""
    ref_scores = ref_moe.router(x, p.router)
    ref_ids = ref_moe.select(ref_scores, p.bias, top_k)
    key = ref_scores + p.bias.double()
    for row in (ref_ids != ids).any(dim=-1).nonzero().flatten().tolist():
        gap = (key[row, ref_ids[row]].sort().values - key[row, ids[row]].sort().values).abs().max()
        assert gap < 1e-5, f"token {row}: choice {ids[row].tolist()} vs reference {ref_ids[row].tolist()}"
    return _reference(x, p, top_k, scaling, ids=ids)


@pytest.mark.parametrize("top_k", [2, 4])
def test_consistent_matches_float64_reference(top_k, fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    p = _params(generator)
    x = torch.randn(NUM_TOKENS, HIDDEN, generator=generator).to(torch.bfloat16)
    ids = topk_consistent(router_consistent(x, p.router, row_multiple=ROW_MULTIPLE), p.bias,
                              top_k=top_k, scaling=SCALING)[0]
    ref = _reference_for(x, p, top_k, SCALING, ids)
    error = _relative_error(moe_consistent(x, p, top_k), ref)
    fast_ids = topk_fast(router_fast(x, p.router), p.bias, top_k=top_k, scaling=SCALING)[0]
    fast_error = _relative_error(moe_fast(x, p, top_k), _reference(x, p, top_k, ids=fast_ids))
    fast_flips = int((fast_ids.sort().values != ids.sort().values).any(dim=-1).sum())
    print(f"\ntop_k={top_k}: consistent max relative error {error:.3e}, fast {fast_error:.3e} on its "
          f"own choice (tolerance {TOLERANCE:.0e}); the fast router (bf16 logits) chose another "
          f"expert set for {fast_flips}/{len(x)} tokens")
    assert error <= TOLERANCE


def _fitted_factor(forward, scaling, fresh_seed):
    """c in out ~ c * y(x), with every routed expert equal to y and no shared expert."""
    generator = torch.Generator().manual_seed(fresh_seed)
    p = _params(generator, identical_experts=True, shared_scale=0.0)
    x = torch.randn(NUM_TOKENS, HIDDEN, generator=generator).to(torch.bfloat16)
    y = ref_moe.expert(x, p.up[0], p.down[0])
    out = forward(x, p, 4, scaling).double()
    return float((out * y).sum() / (y * y).sum()), out, x, p, y


@pytest.mark.parametrize("forward", [moe_consistent, moe_fast], ids=["consistent", "fast"])
@pytest.mark.parametrize("scaling", [1.0, SCALING])
def test_routing_weight_is_applied_once(forward, scaling, fresh_seed):
    """With every routed expert equal and no shared expert, out = (sum of weights) * y(x)
    = scaling * y(x) exactly in real arithmetic; a weight applied twice (sum w^2), never
    (k), or a scaling applied twice (scaling^2) lands far from that."""
    fitted, out, x, p, y = _fitted_factor(forward, scaling, fresh_seed)
    print(f"\n{forward.__name__}, scaling {scaling}: fitted factor {fitted:.5f}")
    assert abs(fitted / scaling - 1) < 1e-2, f"output is {fitted:.4f} x y(x), expected {scaling} x"
    assert _relative_error(out, scaling * y) <= TOLERANCE
    assert _relative_error(out, _reference(x, p, 4, scaling)) <= TOLERANCE


def test_mixing_experts_and_combine_of_two_kinds_misapplies_the_weight(fresh_seed):
    """Negative control of the test above, and the reason a contract must pair expert_gemm
    and moe_combine: fast experts fold the weight in, the consistent combine applies it again."""
    def mixed(x, p, top_k, scaling):
        ids, weights = topk_consistent(router_consistent(x, p.router, row_multiple=ROW_MULTIPLE),
                                           p.bias, top_k=top_k, scaling=scaling)
        slots = experts_fast(x, ids, weights, p.up, p.down)
        return combine_consistent(slots, ids, weights, shared_fast(x, p.shared_up, p.shared_down))
    fitted = _fitted_factor(mixed, SCALING, fresh_seed)[0]
    print(f"\nexperts_fast + combine_consistent: fitted factor {fitted:.4f} (sum of w^2, not {SCALING})")
    assert abs(fitted / SCALING - 1) > 0.05
