"""Each consistent op agrees with its float64 reference (gates/reference/) within a relative
tolerance set by the dtype of its output: max |op - ref| / max |ref| <= 1e-5 for fp32 and
1e-2 for bf16 (about two bf16 ulps of the output's scale). Bitwise identity is tested
elsewhere; this checks that the consistent arithmetic still computes the right math.
"""
import pytest
import torch

from gates.reference import activation as ref_activation
from gates.reference import attention as ref_attention
from gates.reference import linear as ref_linear
from gates.reference import logprob as ref_logprob
from gates.reference import norm as ref_norm
from gates.reference import rope as ref_rope
from kernels.models.batch import Segment
from kernels.models.state import ContiguousKV
from kernels.ops.activation.consistent import consistent as activation_consistent
from kernels.ops.attention.consistent import consistent as attention_consistent
from kernels.ops.linear.consistent import consistent as linear_consistent
from kernels.ops.logprob.consistent import consistent as logprob_consistent
from kernels.ops.norm.consistent import consistent as norm_consistent
from kernels.ops.rope.consistent import _device_table
from kernels.ops.rope.consistent import consistent as rope_consistent

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
DTYPES = (torch.float32, torch.bfloat16)


def _randn(generator, shape, dtype, scale=1.0):
    return (torch.randn(shape, generator=generator) * scale).to(dtype)


def assert_matches_reference(out, ref, what):
    """Relative error to the output's scale, within the tolerance of the output dtype."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} vs reference {tuple(ref.shape)}"
    assert ref.dtype == torch.float64, f"{what}: reference computed in {ref.dtype}"
    error = float((out.double() - ref).abs().max() / ref.abs().max())
    tolerance = TOLERANCE[out.dtype]
    assert error <= tolerance, f"{what}: max relative error {error:.3e} > {tolerance:.0e}"
    print(f"\n{what}: max relative error {error:.3e} (tolerance {tolerance:.0e})")


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear(dtype, fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    x, w = _randn(generator, (37, 512), dtype), _randn(generator, (300, 512), dtype, 0.05)
    assert_matches_reference(linear_consistent(x, w, row_multiple=8), ref_linear.linear(x, w),
                             f"linear.consistent {dtype} seed {fresh_seed}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("has_residual", [False, True])
def test_norm(dtype, has_residual, fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    x, w = _randn(generator, (37, 1024), dtype), 1.0 + _randn(generator, (1024,), dtype, 0.1)
    residual = _randn(generator, (37, 1024), dtype, 2.0) if has_residual else None
    out, new_residual = norm_consistent(x, w, eps=1e-6, residual=residual)
    ref, ref_residual = ref_norm.rmsnorm(x, w, eps=1e-6, residual=residual)
    what = f"norm.consistent {dtype} residual={has_residual} seed {fresh_seed}"
    assert_matches_reference(out, ref, what)
    if has_residual:
        assert_matches_reference(new_residual, ref_residual, f"{what}, new residual")


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope(dtype, fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    q, k = _randn(generator, (37, 4, 64), dtype), _randn(generator, (37, 2, 64), dtype)
    positions = torch.randint(0, 4096, (37,), generator=generator)
    q_out, k_out = rope_consistent(q, k, positions, theta=1e6, max_position=4096)
    what = f"rope.consistent {dtype} seed {fresh_seed}"
    assert_matches_reference(q_out, ref_rope.rope(q, positions, theta=1e6), f"{what}, q")
    assert_matches_reference(k_out, ref_rope.rope(k, positions, theta=1e6), f"{what}, k")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("start, length", [(0, 70), (40, 30)])
def test_attention(dtype, start, length, fresh_seed):
    """A prefill segment, and a chunk continuing a sequence whose first `start` tokens are cached."""
    generator = torch.Generator().manual_seed(fresh_seed)
    context = start + length
    q = _randn(generator, (context, 4, 64), dtype)
    k, v = _randn(generator, (context, 2, 64), dtype), _randn(generator, (context, 2, 64), dtype)
    kv, scale = ContiguousKV(), 64 ** -0.5
    if start:
        kv.write(Segment(0, 0, start, 0, "engine_prefill"), k[:start], v[:start])
    segment = Segment(0, start, length, 0, "engine_prefill")
    out = attention_consistent(q[start:], k[start:], v[start:], (segment,), kv, scale=scale,
                               block_kv=32, row_multiple=8)
    ref = ref_attention.causal_gqa(q[start:], k, v, start, scale=scale)
    assert_matches_reference(out, ref, f"attention.consistent {dtype} start={start} length={length} seed {fresh_seed}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_activation(dtype, fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    gate, up = _randn(generator, (37, 768), dtype, 3.0), _randn(generator, (37, 768), dtype)
    assert_matches_reference(activation_consistent(gate, up), ref_activation.silu_mul(gate, up),
                             f"activation.consistent {dtype} seed {fresh_seed}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("full", [False, True])
def test_logprob(dtype, full, fresh_seed):
    """Logits in `dtype`; the log-probabilities are fp32 whatever it is, so fp32's tolerance."""
    generator = torch.Generator().manual_seed(fresh_seed)
    logits = _randn(generator, (37, 5000), dtype, 3.0)
    targets = torch.randint(0, 5000, (37,), generator=generator)
    temperatures = 0.5 + torch.rand(37, generator=generator)
    out = logprob_consistent(logits, targets, temperatures, full=full)
    assert_matches_reference(out, ref_logprob.logprob(logits, targets, temperatures, full=full),
                             f"logprob.consistent {dtype} logits, full={full}, seed {fresh_seed}")


def test_rope_table_made_in_inference_mode_still_serves_autograd(fresh_seed):
    """The engine's first rope call runs under inference mode and builds the cached table;
    the trainer's later forward must still be able to save it for backward."""
    generator = torch.Generator().manual_seed(fresh_seed)
    theta = 1000.0 + fresh_seed % 997  # a table no other test has cached
    q, k = _randn(generator, (5, 2, 16), torch.float32), _randn(generator, (5, 1, 16), torch.float32)
    positions = torch.arange(5)
    with torch.inference_mode():
        rope_consistent(q, k, positions, theta=theta, max_position=64)
    tables = _device_table(theta, 16, 64, q.device)
    assert not any(t.is_inference() for t in tables), "the cached table is an inference tensor"
    leaf = q.clone().requires_grad_()
    rotated, _ = rope_consistent(leaf, k, positions, theta=theta, max_position=64)
    (grad,) = torch.autograd.grad(rotated.sum(), [leaf])
    assert grad.shape == q.shape and bool(torch.isfinite(grad).all())
