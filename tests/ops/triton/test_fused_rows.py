"""Logic tests of the row kernels on CPU through the Triton interpreter: scaled logits rows
(logprob/triton.py), fused RMSNorm (+ residual), RoPE, SiLU*up, the fused q/k norm + RoPE (with the
K/V write it may take on) and the K/V write. A row's bits must not follow the batch, a strided view
or the launch; each within rounding of float64 or bit-equal to the launches it fuses. They prove logic, not GPU bits:
benchmarks/gpu_kernel_check.py checks the bits on the device. The checks (check_*) run in a
child pytest with TRITON_INTERPRET=1 (tests/ops/triton/interpreter.py says why).
"""
import pytest
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from tests.ops.triton.interpreter import DTYPES, import_kernel, run_checks


def test_fused_row_kernels_under_the_triton_interpreter(fresh_seed):
    """Runs this module's check_* functions (fused rows) in a child pytest with TRITON_INTERPRET=1."""
    run_checks(__file__, fresh_seed)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16))  # bf16 is broken in the interpreter
def check_scaled_rows_have_torch_division_bits(dtype, fresh_seed):
    """logprob/triton.py's scale_rows (`scaled` on CUDA outside autograd) gives the bits of torch's
    x.float() / t[:, None] over a vocabulary that is not a multiple of BLOCK, with signed
    zeros, subnormals (fp32 quotients over a huge temperature, fp16 logits) and temperatures
    that round; a division by (1 + ulp) instead is
    caught (negative control)."""
    module = import_kernel("logprob.triton")
    gen = torch.Generator().manual_seed(fresh_seed)
    rows, vocab = 3, module.BLOCK + 37
    x = (torch.randn(rows, vocab, generator=gen) * 8).to(dtype)
    x[:, :4] = torch.tensor([0.0, -0.0, 1e-7, -6e-8]).to(dtype)  # signed zeros, fp16 subnormals
    t = torch.tensor([0.7, 1.3, 3e37 if dtype == torch.float32 else 0.3])
    ours, torchs = module.scale_rows(x, t), x.float() / t[:, None]
    assert_bitwise_equal(ours, torchs, f"{dtype} seed={fresh_seed}")
    assert torch.signbit(ours[:, 1]).all() and (ours[:, 0] == 0).all() and not torch.signbit(ours[:, 0]).any()
    subnormal = (ours != 0) & (ours.abs() < torch.finfo(torch.float32).tiny) if dtype == torch.float32 else \
        (x != 0) & (x.abs() < torch.finfo(dtype).tiny)  # half: subnormal logits widened
    assert subnormal.any(), f"no subnormal occurred ({dtype})"
    off = x.float() / (t * (1 + torch.finfo(torch.float32).eps))[:, None]
    assert first_bit_difference(ours, off) is not None


@pytest.fixture(scope="module")
def fused():
    return {name: import_kernel(name) for name in ("norm.triton", "rope.triton", "activation.triton")}


@pytest.mark.parametrize("dtype", DTYPES)
def check_fused_norm_rows_do_not_follow_the_batch(fused, dtype, fresh_seed):
    """RMSNorm (+ residual): a row alone, in batches and as a strided 3D view gives the
    bits of the same row in the largest batch; close to float64; the fast variant (norm
    reads the unrounded sum) differs in bits where the residual sum rounds."""
    from gates.reference.norm import rmsnorm
    norm = fused["norm.triton"]
    gen = torch.Generator().manual_seed(fresh_seed)
    x, res = (torch.randn(37, 300, generator=gen).to(dtype) for _ in range(2))
    w = (1 + 0.1 * torch.randn(300, generator=gen)).to(dtype)
    for residual in (None, res):
        whole, h_whole = norm.consistent(x, w, eps=1e-6, residual=residual)
        for lo, hi in ((0, 1), (5, 6), (3, 20), (36, 37)):
            part, h_part = norm.consistent(x[lo:hi], w, eps=1e-6, residual=None if residual is None else res[lo:hi])
            assert_bitwise_equal(part, whole[lo:hi],
                                 f"rows {lo}:{hi} residual={residual is not None} seed={fresh_seed}")
            if residual is not None:
                assert_bitwise_equal(h_part, h_whole[lo:hi], f"residual stream {lo}:{hi} seed={fresh_seed}")
        exact, _ = rmsnorm(x, w, eps=1e-6, residual=residual)
        error = float((whole.double() - exact).abs().max())
        assert error < (1e-5 if dtype == torch.float32 else 8e-3), f"error {error} seed={fresh_seed}"
    strided = torch.cat([x, res], dim=1).reshape(37, 2, 300)  # rows [t, 0] are x: a [T, H, D]-style view
    view_out, _ = norm.consistent(strided[:, :1, :], w, eps=1e-6)
    assert_bitwise_equal(view_out[:, 0], norm.consistent(x, w, eps=1e-6)[0], f"strided view seed={fresh_seed}")
    fast_out, fast_h = norm.fast_fused(x, w, eps=1e-6, residual=res)
    consistent_out, consistent_h = norm.consistent(x, w, eps=1e-6, residual=res)
    assert_bitwise_equal(fast_h, consistent_h, f"both keep the rounded residual stream seed={fresh_seed}")
    if dtype != torch.float32:  # in fp32 the sum is the same rounded or not
        assert first_bit_difference(fast_out, consistent_out) is not None, f"fast == consistent seed={fresh_seed}"


def check_fused_norm_gradients_match_float64(fused, fresh_seed):
    from gates.reference.norm import rmsnorm
    norm = fused["norm.triton"]
    gen = torch.Generator().manual_seed(fresh_seed)
    leaves = [torch.randn(9, 64, generator=gen).requires_grad_(),
              (1 + 0.1 * torch.randn(64, generator=gen)).requires_grad_(),
              torch.randn(9, 64, generator=gen).requires_grad_()]
    out, h = norm.consistent(leaves[0], leaves[1], eps=1e-6, residual=leaves[2])
    grad_out, grad_h = torch.randn(9, 64, generator=gen), torch.randn(9, 64, generator=gen)
    grads = torch.autograd.grad([out, h], leaves, [grad_out, grad_h])
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref_out, ref_h = rmsnorm(ref_leaves[0], ref_leaves[1], eps=1e-6, residual=ref_leaves[2])
    ref_grads = torch.autograd.grad([ref_out, ref_h], ref_leaves, [grad_out.double(), grad_h.double()])
    for name, grad, ref in zip(("x", "w", "residual"), grads, ref_grads):
        relative = float((grad.double() - ref).norm() / ref.norm())
        print(f"norm d{name}: relative error vs float64 = {relative:.2e} (tolerance 1e-5)")
        assert relative < 1e-5, f"d{name} relative error {relative} seed={fresh_seed}"


@pytest.mark.parametrize("dtype", DTYPES)
def check_fused_rope_and_silu_rows_do_not_follow_the_batch(fused, dtype, fresh_seed):
    """RoPE from the table and SiLU*up: a token alone equals the same token in the batch,
    a strided q view equals its copy; both within rounding of float64; the fast RoPE (angles
    computed per call, products rounded) differs from the table's bits."""
    from gates.reference.activation import silu_mul
    from gates.reference.rope import rope as rope_reference
    from kernels.ops.rope.consistent import _fp32_table
    rope, act = fused["rope.triton"], fused["activation.triton"]
    gen = torch.Generator().manual_seed(fresh_seed)
    qkv = torch.randn(23, 6 * 32, generator=gen).to(dtype)
    q, k = qkv[:, :128].view(23, 4, 32), qkv[:, 128:].view(23, 2, 32)
    positions = torch.randint(0, 500, (23,), generator=gen)
    cos, sin = _fp32_table(1e6, 32, 512)
    whole_q, whole_k = rope.consistent(q, k, positions, cos, sin)
    for lo, hi in ((0, 1), (7, 8), (2, 15)):
        part_q, part_k = rope.consistent(q[lo:hi], k[lo:hi], positions[lo:hi], cos, sin)
        assert_bitwise_equal(part_q, whole_q[lo:hi], f"rope q {lo}:{hi} seed={fresh_seed}")
        assert_bitwise_equal(part_k, whole_k[lo:hi], f"rope k {lo}:{hi} seed={fresh_seed}")
    assert_bitwise_equal(rope.consistent(q.contiguous(), k, positions, cos, sin)[0], whole_q, "strided q")
    exact = rope_reference(q, positions, theta=1e6)
    tolerance = 1e-5 if dtype == torch.float32 else 4e-3
    assert float((whole_q.double() - exact).abs().max()) < tolerance, f"rope error seed={fresh_seed}"
    fast_q, _ = rope.fast(q, k, positions, 1e6)
    assert float((fast_q.double() - exact).abs().max()) < 64 * tolerance, f"fast rope error seed={fresh_seed}"
    assert first_bit_difference(fast_q, whole_q) is not None, f"fast rope == table rope seed={fresh_seed}"
    gate, up = (torch.randn(19, 100, generator=gen).to(dtype) for _ in range(2))
    whole = act.consistent(gate, up)
    for lo, hi in ((0, 1), (4, 11)):
        assert_bitwise_equal(act.consistent(gate[lo:hi], up[lo:hi]), whole[lo:hi], f"silu rows {lo}:{hi}")
    error = float((whole.double() - silu_mul(gate, up)).abs().max())
    assert error < (1e-5 if dtype == torch.float32 else 8e-3), f"silu error {error} seed={fresh_seed}"
    fast = act.fast(gate, up)
    if dtype != torch.float32:
        assert first_bit_difference(fast, whole) is not None, f"fast silu == consistent seed={fresh_seed}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [32, 128])
def check_qk_norm_rope_is_the_three_launches(fused, dtype, head_dim, fresh_seed):
    """The fused q/k norm + RoPE gives the bits of norm(q), norm(k), then rope, for both
    contracts' arithmetic (the table, the angles from theta), q and k read through the fused
    qkv's strides; the normed rows it also stores are norm's output."""
    from kernels.ops.rope.consistent import _fp32_table
    norm, rope = fused["norm.triton"], fused["rope.triton"]
    kernel = import_kernel("qk_norm_rope_triton")
    gen = torch.Generator().manual_seed(fresh_seed)
    tokens, q_heads, k_heads = 21, 4, 2
    qkv = torch.randn(tokens, (q_heads + 2 * k_heads) * head_dim, generator=gen).to(dtype)
    q = qkv[:, :q_heads * head_dim].view(tokens, q_heads, head_dim)
    k = qkv[:, q_heads * head_dim:(q_heads + k_heads) * head_dim].view(tokens, k_heads, head_dim)
    q_w, k_w = ((1 + 0.1 * torch.randn(head_dim, generator=gen)).to(dtype) for _ in range(2))
    positions = torch.randint(0, 500, (tokens,), generator=gen)
    cos, sin = _fp32_table(1e6, head_dim, 512)
    q_normed, k_normed = norm.launch(q, q_w, 1e-6)[0], norm.launch(k, k_w, 1e-6)[0]
    for tables, theta in (({"cos_table": cos, "sin_table": sin}, 0.0), ({}, 1e6)):
        expected = (q_normed, k_normed, *rope.launch(q_normed, k_normed, positions, theta=theta, **tables))
        got = kernel.launch(q, k, q_w, k_w, positions, eps=1e-6, theta=theta, **tables)
        for name, a, b in zip(("normed q", "normed k", "rotated q", "rotated k"), got, expected):
            assert_bitwise_equal(a, b, f"{name}, table={bool(tables)} D={head_dim} seed={fresh_seed}")
    moved = kernel.launch(q, k, q_w, k_w, positions, eps=1e-2, cos_table=cos, sin_table=sin)  # control: eps
    assert first_bit_difference(moved[2], got[2]) is not None, f"the check cannot see the norm seed={fresh_seed}"


@pytest.mark.parametrize("dtype", DTYPES)
def check_qk_norm_rope_writes_the_kv_rows_as_the_scatter(fused, dtype, fresh_seed):
    """Given the pools, the fused q/k norm + RoPE also lands the rotated k and v (read through
    the fused qkv's strides) where `pool[slots] = rows` puts them, its four outputs the bits of
    the launch without the write; slots nobody wrote keep their NaN. Controls: the unrotated k
    in the expected pool is caught; a pool of another dtype is refused with nothing written."""
    kernel = import_kernel("qk_norm_rope_triton")
    gen = torch.Generator().manual_seed(fresh_seed)
    tokens, q_heads, k_heads, head_dim = 37, 4, 2, 32  # 64 (token, head) rows per program: a partial tile
    qkv = torch.randn(tokens, (q_heads + 2 * k_heads) * head_dim, generator=gen).to(dtype)
    q = qkv[:, :q_heads * head_dim].view(tokens, q_heads, head_dim)
    k = qkv[:, q_heads * head_dim:(q_heads + k_heads) * head_dim].view(tokens, k_heads, head_dim)
    v = qkv[:, (q_heads + k_heads) * head_dim:].view(tokens, k_heads, head_dim)
    q_w, k_w = ((1 + 0.1 * torch.randn(head_dim, generator=gen)).to(dtype) for _ in range(2))
    positions = torch.randint(0, 500, (tokens,), generator=gen)
    slots = torch.randperm(100, generator=gen)[:tokens]
    pools = [torch.full((100, k_heads, head_dim), float("nan"), dtype=dtype) for _ in range(2)]
    plain = kernel.launch(q, k, q_w, k_w, positions, eps=1e-6, theta=1e6)
    got = kernel.launch(q, k, q_w, k_w, positions, eps=1e-6, theta=1e6, kv_write=(v, *pools, slots))
    for name, a, b in zip(("normed q", "normed k", "rotated q", "rotated k"), got, plain):
        assert_bitwise_equal(a, b, f"{name} with the K/V write seed={fresh_seed}")
    expected = [torch.full_like(p, float("nan")) for p in pools]
    expected[0][slots], expected[1][slots] = plain[3], v
    assert_bitwise_equal(pools[0], expected[0], f"keys seed={fresh_seed}")
    assert_bitwise_equal(pools[1], expected[1], f"values seed={fresh_seed}")
    unrotated = expected[0].clone()
    unrotated[slots] = k
    assert first_bit_difference(pools[0], unrotated) is not None, f"the check cannot see the rotation seed={fresh_seed}"
    other = [torch.full((100, k_heads, head_dim), float("nan"), dtype=torch.float64) for _ in range(2)]
    with pytest.raises(ValueError, match="kv_write"):
        kernel.launch(q, k, q_w, k_w, positions, eps=1e-6, theta=1e6, kv_write=(v, *other, slots))
    assert other[0].isnan().all() and other[1].isnan().all()


@pytest.mark.parametrize("dtype", DTYPES)
def check_kv_write_is_the_two_scatters(dtype, fresh_seed):
    """The one-launch K/V write lands every row where `pool[slots] = rows` puts it, v read
    through the fused qkv's row stride; slots nobody wrote keep their NaN; a layout it does
    not take (a head stride that is not D) is refused with nothing written."""
    kernel = import_kernel("kv_write_triton")
    gen = torch.Generator().manual_seed(fresh_seed)
    rows, heads, dim = 37, 2, 48  # 37 rows: tiles of 32 rows (4096 // 128) leave one partial
    qkv = torch.randn(rows, 5 * heads * dim, generator=gen).to(dtype)
    k = torch.randn(rows, heads, dim, generator=gen).to(dtype)
    v = qkv[:, 3 * heads * dim:4 * heads * dim].view(rows, heads, dim)
    slots = torch.randperm(100, generator=gen)[:rows]
    pools = [torch.full((100, heads, dim), float("nan"), dtype=dtype) for _ in range(2)]
    expected = [p.clone() for p in pools]
    expected[0][slots], expected[1][slots] = k, v
    assert kernel.scatter(pools[0], pools[1], slots, k, v)
    assert_bitwise_equal(pools[0], expected[0], f"keys seed={fresh_seed}")
    assert_bitwise_equal(pools[1], expected[1], f"values seed={fresh_seed}")
    untouched = [p.clone() for p in pools]
    assert not kernel.scatter(pools[0], pools[1], slots, k.transpose(1, 2).contiguous().transpose(1, 2), v)
    assert_bitwise_equal(pools[0], untouched[0], "a refused layout wrote nothing")
