"""DeepSeek-V4's routed experts (kernels/ops/expert_gemm/ with `swiglu_limit`): the consistent
per-slot outputs of a row are the same bits alone and in any batch, and within a float64 tolerance
of SiLU(min(gate, L)) * clamp(up, -L, L); the clamps are met on both sides (the inputs reach past
L). Fast: a loose tolerance, and its weighted outputs follow the routing weights it is given."""
import torch

from gates.compare import first_bit_difference
from gates.inputs import fresh_seed
from gates.reference import moe as ref_moe
from kernels.ops.expert_gemm.consistent import experts_consistent
from kernels.ops.expert_gemm.fast import experts_fast

ROWS, HIDDEN, INTER, EXPERTS, TOP_K, LIMIT = 29, 64, 24, 6, 2, 0.75
TOLERANCE, FAST_TOLERANCE = 1e-2, 2e-2  # relative to max |y|, vs float64 (bf16 activations)


def _inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(ROWS, HIDDEN, generator=gen).to(torch.bfloat16)
    gate_up = (torch.randn(EXPERTS, 2 * INTER, HIDDEN, generator=gen) / 4).to(torch.bfloat16)
    down = (torch.randn(EXPERTS, HIDDEN, INTER, generator=gen) / 4).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(EXPERTS, generator=gen)[:TOP_K] for _ in range(ROWS)])
    return x, gate_up, down, ids, torch.rand(ROWS, TOP_K, generator=gen) + 0.1


def _clamped_fraction(x, gate_up, ids):
    """Fraction of the chosen experts' gate and up pre-activations past the limit."""
    h = torch.stack([x[r].double() @ gate_up[ids[r]].double().transpose(1, 2) for r in range(ROWS)])
    gate, up = h.chunk(2, dim=-1)
    return float((gate > LIMIT).double().mean()), float((up.abs() > LIMIT).double().mean())


def _reference(x, gate_up, down, ids):
    return torch.stack([torch.stack([ref_moe.swiglu_expert(x[r:r + 1], gate_up[e], down[e], LIMIT)[0]
                                     for e in ids[r].tolist()]) for r in range(ROWS)])


def test_consistent_swiglu_experts_are_batch_invariant_and_near_float64():
    seed = fresh_seed()
    x, gate_up, down, ids, weights = _inputs(seed)
    gate_past, up_past = _clamped_fraction(x, gate_up, ids)
    assert gate_past > 0.05 and up_past > 0.05, (seed, gate_past, up_past)  # the clamps take part
    whole = experts_consistent(x, ids, weights, gate_up, down, row_multiple=8, swiglu_limit=LIMIT)
    for start, size in ((0, 1), (4, 3), (9, 17)):
        part = experts_consistent(x[start:start + size], ids[start:start + size], weights[start:start + size],
                                  gate_up, down, row_multiple=8, swiglu_limit=LIMIT)
        assert first_bit_difference(part, whole[start:start + size]) is None, (seed, start, size)
    expected = _reference(x, gate_up, down, ids)
    error = float((whole.double() - expected).abs().max() / expected.abs().max())
    print(f"seed {seed}: clamped gate {gate_past:.0%}, up {up_past:.0%}; consistent vs float64 {error:.2e} "
          f"(tolerance {TOLERANCE:g})")
    assert error <= TOLERANCE


def test_fast_swiglu_experts_apply_the_weight_and_stay_near_float64():
    seed = fresh_seed()
    x, gate_up, down, ids, weights = _inputs(seed)
    got = experts_fast(x, ids, weights, gate_up, down, swiglu_limit=LIMIT)
    expected = _reference(x, gate_up, down, ids) * weights.double()[..., None]
    error = float((got.double() - expected).abs().max() / expected.abs().max())
    print(f"seed {seed}: fast (weighted) vs float64 {error:.2e} (tolerance {FAST_TOLERANCE:g})")
    assert error <= FAST_TOLERANCE
    unclamped = experts_fast(x, ids, weights, gate_up, down, swiglu_limit=1e4)
    assert first_bit_difference(unclamped, got) is not None  # the limit is what the inputs meet
