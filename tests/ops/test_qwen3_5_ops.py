"""Qwen3.5's row ops (kernels/ops: activation's sigmoid gate, gated_norm's gate-after table, the
router's softmax) keep every row's bits in any batch under the consistent variant, and their
fast variants are the negative controls: an element alone differs from itself inside a long
tensor (torch's vector body and scalar tail), with the count printed."""
import pytest
import torch

from gates.compare import first_bit_difference
from kernels.ops.activation import SIGMOID_GATE
from kernels.ops.gated_norm import GATE_AFTER
from kernels.ops.router import VARIANTS as ROUTERS
from tests.ops.test_batch_invariance import DTYPES, LARGEST, _randn, assert_batch_invariant


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("columns", [771, 1])  # an attention gate per element; the shared expert's one column
def test_sigmoid_gate_consistent_is_batch_invariant(dtype, columns, fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    x, gate = _randn(generator, (LARGEST, 771), dtype), _randn(generator, (LARGEST, columns), dtype, 3.0)
    assert_batch_invariant(SIGMOID_GATE["consistent"], (x, gate), f"sigmoid_gate {dtype} seed {fresh_seed}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_gate_after_norm_consistent_is_batch_invariant(dtype, fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    y, z = torch.randn(LARGEST, 4, 128, generator=generator), _randn(generator, (LARGEST, 4, 128), dtype, 2.0)
    w = 1.0 + _randn(generator, (128,), dtype, 0.1)
    op = lambda rows, gates: GATE_AFTER["consistent"](rows, gates, w, eps=1e-6)  # noqa: E731
    assert_batch_invariant(op, (y, z), f"gated_norm_after {dtype} seed {fresh_seed}")


def test_softmax_router_consistent_is_batch_invariant(fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    x, w = _randn(generator, (LARGEST, 256), torch.bfloat16), _randn(generator, (257, 256), torch.bfloat16, 0.05)
    op = lambda rows: ROUTERS["consistent"](rows, w, row_multiple=8, scoring="softmax")  # noqa: E731
    assert_batch_invariant(op, (x,), f"router softmax seed {fresh_seed}")
    scores = op(x)
    assert torch.all(scores > 0) and float((scores.sum(-1) - 1).abs().max()) < 1e-5  # a distribution


@pytest.mark.parametrize("variant, must_differ", [("fast", True), ("consistent", False)])
def test_sigmoid_gate_element_alone_vs_inside_long_tensor(variant, must_differ, fresh_seed):
    """fast: torch's sigmoid rounds differently in its vector body and scalar tail (negative
    control); consistent: an element's bits do not depend on where it sits."""
    op = SIGMOID_GATE[variant]
    generator = torch.Generator().manual_seed(fresh_seed)
    x, gate = _randn(generator, (4000,)), _randn(generator, (4000,), scale=4.0)
    alone = torch.cat([op(x[i:i + 1], gate[i:i + 1]) for i in range(4000)])
    difference = first_bit_difference(alone, op(x, gate))
    num_differing = 0 if difference is None else difference.num_differing
    print(f"\nsigmoid_gate.{variant} fp32: {num_differing}/4000 elements differ alone vs inside")
    assert (num_differing > 0) == must_differ, (num_differing, fresh_seed)
