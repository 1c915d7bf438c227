"""Logic tests of the GEMM kernels on CPU through the Triton interpreter: linear.consistent's
CUDA entry (kernels/ops/linear/cuda.py: rows that do not follow M or the launch table, a tuned
table that moves the load path, not the bits) and the grouped MoE experts (kernels/ops/expert_gemm/cuda.py:
the bits of the per-expert loop). They prove logic, not GPU bits: benchmarks/gpu_kernel_check.py
checks the bits on the device. The checks (check_*) run in a child pytest with TRITON_INTERPRET=1,
with the interpreter's tl.dot swapped for a fixed-order dot (tests/ops/triton/interpreter.py says why).
Negative control: a K split whose count follows M must move the bits.
"""
import json

import pytest
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from tests.ops.triton.interpreter import import_kernel, run_checks, with_fixed_order_dot


def test_gemm_kernels_under_the_triton_interpreter(fresh_seed):
    """Runs this module's check_* functions (GEMM) in a child pytest with TRITON_INTERPRET=1."""
    run_checks(__file__, fresh_seed)


@pytest.fixture(scope="module")
def linear_cuda():
    yield from with_fixed_order_dot("linear.cuda")


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16))  # bf16 is broken in the interpreter
def check_gemm_rows_do_not_follow_m_or_the_tile_table(linear_cuda, dtype, fresh_seed):
    """linear.consistent's CUDA entry: row i of every M (the launch table moves the tile with
    M: 16/64/128/256 rows, BLOCK_K 128 or 64; fp32 its own tiles) equals row i of M = 300;
    leading dims flatten into rows; a K that is not a multiple of any tile is masked."""
    gen = torch.Generator().manual_seed(fresh_seed)
    x = torch.randn(300, 200, generator=gen).to(dtype)
    w = (torch.randn(48, 200, generator=gen) / 8).to(dtype)
    largest = linear_cuda.forward(x, w)
    assert len({linear_cuda._launch(m, 48, 200, dtype, x.device) for m in (1, 5, 16, 40, 100, 257, 300)}) > 1
    for m in (1, 5, 16, 40, 100, 257):
        assert_bitwise_equal(linear_cuda.forward(x[:m], w), largest[:m], f"M={m} {dtype} seed={fresh_seed}")
    shaped = linear_cuda.forward(x[:40].reshape(2, 20, 200), w)
    assert_bitwise_equal(shaped.reshape(40, 48), largest[:40], f"leading dims {dtype} seed={fresh_seed}")
    error = (largest.double() - x.double() @ w.double().T).abs().max()
    assert error <= (1e-4 if dtype == torch.float32 else 2e-2), f"error {error} vs float64, seed={fresh_seed}"
    with pytest.raises(ValueError, match="x is"):
        linear_cuda.forward(x, w.to(torch.float64))
    # fp32 out (a layout's K-leaf partials): the same accumulator unrounded, row-invariant too,
    # and a K slice read in place (strided rows) gives the bits of a contiguous copy
    unrounded = linear_cuda.forward(x, w, torch.float32)
    assert_bitwise_equal(unrounded.to(dtype), largest, f"fp32 out rounded once {dtype} seed={fresh_seed}")
    for m in (1, 40, 257):
        assert_bitwise_equal(linear_cuda.forward(x[:m], w, torch.float32), unrounded[:m], f"fp32 out M={m}")
    leaf = linear_cuda.forward(x[:40, 128:192], w[:, 128:192], torch.float32)
    assert_bitwise_equal(leaf, linear_cuda.forward(x[:40, 128:192].contiguous(), w[:, 128:192].contiguous(),
                                                   torch.float32), f"strided K leaf {dtype} seed={fresh_seed}")
    # negative control: a K split whose count follows M (2 slices for small M) moves the bits;
    # shown in fp32, where a 1-ulp change of the accumulator is not hidden by rounding to fp16
    x32, w32 = x[:64].float(), w.float()
    split = linear_cuda.linear_triton.consistent(x32, w32, config=(16, 64, 4, 3), num_splits=2, block_k=32)
    assert first_bit_difference(split, linear_cuda.forward(x32, w32)) is not None, \
        f"split-K control did not differ, seed={fresh_seed}"


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16))
def check_gemm_tuned_table_moves_the_load_path_not_the_bits(linear_cuda, dtype, fresh_seed, tmp_path, monkeypatch):
    """A tuned launch table (kernels/ops/gemm_tuning.py) for the shape: TMA loads, a persistent
    grid walking several tiles a program, and pointer loads by M bucket, give each row the bits
    of the built-in table; a shape the table does not list takes its default rows, with the same
    bits; an operand the copy engine cannot address falls back to pointer loads.
    fp32 operands keep their own tiles: only half precision reads the tuned table."""
    from kernels.ops import gemm_tuning
    gen = torch.Generator().manual_seed(fresh_seed)
    x = torch.randn(300, 200, generator=gen).to(dtype)
    w = (torch.randn(48, 200, generator=gen) / 8).to(dtype)
    default = linear_cuda.forward(x, w)
    rows = [[4, "persistent", [16, 16, 4, 2], 256], [40, "tma", [32, 16, 4, 2], 64],
            [None, "pointer", [64, 32, 4, 2], 32]]
    other = w[:32]  # a shape the table does not list: its default rows
    other_default = linear_cuda.forward(x, other)
    (tmp_path / "table.json").write_text(json.dumps({"device": "interpreter", "shapes": {"48x200": rows},
                                                     "default": [[None, "tma", [16, 16, 4, 2], 128]]}))
    monkeypatch.setenv(gemm_tuning.ENV, str(tmp_path / "table.json"))
    used = {linear_cuda._launch(m, 48, 200, dtype, x.device)[0] for m in (3, 30, 300)}
    assert used == ({"pointer"} if dtype == torch.float32 else {"persistent", "tma", "pointer"}), used
    for m in (3, 30, 300):
        assert_bitwise_equal(linear_cuda.forward(x[:m], w), default[:m], f"tuned M={m} {dtype} seed={fresh_seed}")
    if dtype != torch.float32:
        assert linear_cuda._launch(30, 32, 200, dtype, x.device) == ("tma", (16, 16, 4, 2), 128)
    assert_bitwise_equal(linear_cuda.forward(x, other), other_default, f"default rows {dtype} seed={fresh_seed}")
    # rows at an odd element offset: no tensor map can address them; the bucket's tile, pointer loads
    shifted = torch.cat([x[:30, :1], x[:30]], dim=1)[:, 1:]
    assert not linear_cuda.linear_triton.tma_ready(shifted, w)
    assert_bitwise_equal(linear_cuda.forward(shifted, w), default[:30], f"unaligned {dtype} seed={fresh_seed}")


@pytest.fixture(scope="module")
def expert_gemm_cuda():
    yield from with_fixed_order_dot("expert_gemm.cuda")


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16))
def check_grouped_experts_equal_the_per_expert_loop(expert_gemm_cuda, linear_cuda, dtype, fresh_seed):
    """expert_gemm.consistent's CUDA entry (two grouped GEMMs for all experts) gives the bits
    of the per-expert loop of linear.consistent, an expert nobody chose included; a token's
    rows do not follow the batch although the tile height does (16 rows at 7 tokens, 128 at
    300)."""
    from kernels.ops.expert_gemm.consistent import experts_loop
    from kernels.ops.expert_gemm.forms import _routing_groups
    from kernels.ops.relu2_mlp.consistent import _relu2_once
    gen = torch.Generator().manual_seed(fresh_seed)
    tokens, hidden, inner, num_experts, top_k = 300, 64, 48, 6, 2
    x = torch.randn(tokens, hidden, generator=gen).to(dtype)
    up = (torch.randn(num_experts, inner, hidden, generator=gen) / 8).to(dtype)
    down = (torch.randn(num_experts, hidden, inner, generator=gen) / 8).to(dtype)
    ids = torch.rand(tokens, num_experts - 1, generator=gen).topk(top_k, dim=-1).indices  # expert 5: no rows
    got = expert_gemm_cuda.experts(x, ids, up, down, _relu2_once)
    expected = experts_loop(x, ids, up, down, linear_cuda.forward)
    assert_bitwise_equal(got, expected, f"grouped vs loop {dtype} seed={fresh_seed}")
    assert expert_gemm_cuda._block_m(7 * top_k, num_experts) != expert_gemm_cuda._block_m(tokens * top_k, num_experts)
    assert_bitwise_equal(expert_gemm_cuda.experts(x[:7], ids[:7], up, down, _relu2_once), got[:7],
                         f"7 tokens vs {tokens} {dtype} seed={fresh_seed}")
    if dtype == torch.float32:  # the backward (per expert, torch matmuls) against float64 autograd
        leaves = [t.clone().requires_grad_() for t in (x, up, down)]
        weight = torch.randn(got.shape, generator=gen)
        (expert_gemm_cuda.experts(*leaves[:1], ids, *leaves[1:], _relu2_once) * weight).sum().backward()
        wide = [t.double().requires_grad_() for t in (x, up, down)]
        reference = x.double().new_empty(got.shape)
        for expert, (rows, slots) in _routing_groups(ids, num_experts).items():
            h = torch.relu(wide[0][rows] @ wide[1][expert].T) ** 2
            reference[rows, slots] = h @ wide[2][expert].T
        (reference * weight.double()).sum().backward()
        for name, ours, theirs in zip(("x", "up", "down"), leaves, wide):
            error = ((ours.grad.double() - theirs.grad).abs().max() / theirs.grad.abs().max()).item()
            assert error < 1e-5, f"grad {name}: relative error {error:.2e} (tolerance 1e-5), seed={fresh_seed}"


def check_grouped_fast_experts_match_the_loop(fresh_seed):
    """The fast contract's grouped experts (torch._grouped_mm) compute experts_fast's
    arithmetic: within bf16 rounding of the per-expert loop (a fast path: no bit claim)."""
    from kernels.ops.expert_gemm.fast import _relu2, experts_fast_loop
    fast_cuda = import_kernel("expert_gemm.fast_cuda")
    gen = torch.Generator().manual_seed(fresh_seed)
    x = torch.randn(50, 64, generator=gen).to(torch.bfloat16)
    up = (torch.randn(6, 48, 64, generator=gen) / 8).to(torch.bfloat16)
    down = (torch.randn(6, 64, 48, generator=gen) / 8).to(torch.bfloat16)
    ids = torch.rand(50, 5, generator=gen).topk(2, dim=-1).indices
    weights = torch.rand(50, 2, generator=gen)
    got = fast_cuda.experts_fast(x, ids, weights, up, down, activation=_relu2)
    loop = experts_fast_loop(x, ids, weights, up, down)
    error = ((got.float() - loop.float()).abs().max() / loop.float().abs().max()).item()
    assert error < 2e-2, f"grouped fast experts: relative error {error:.2e} vs the loop, seed={fresh_seed}"
