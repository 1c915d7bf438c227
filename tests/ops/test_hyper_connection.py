"""DeepSeek-V4's hyper-connections (kernels/ops/hyper_connection/): under the consistent variant a
token's block input, post and comb weights and mixed streams are the same bits alone and inside
batches of several sizes, on one thread or two; both variants agree with float64 within stated
tolerances and give doubly stochastic comb matrices; the fast variant's tokens change with the
batch (negative control, its size printed)."""
import pytest
import torch

from gates.case_calls import intra_op_threads
from gates.compare import first_bit_difference
from gates.inputs import fresh_seed
from gates.reference import hyper_connection as ref
from kernels.ops.hyper_connection import consistent, fast

STREAMS, DIM, TOKENS = 4, 64, 67
KEYWORDS = {"hc_eps": 1e-6, "norm_eps": 1e-6, "sinkhorn_iters": 20}
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}  # relative to max |value|: the weights in fp32;
# the block input and the mixed streams rounded to bf16 (the fast mixing rounds in bf16 more than once)
STOCHASTIC_TOLERANCE = 1e-5  # |column sum - 1| (normalised last) and |row sum - float64's row sum|: twenty
# Sinkhorn iterations leave the rows short of 1 on hard draws in any precision, so rows follow the reference


def _inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    width = (2 + STREAMS) * STREAMS
    return (torch.randn(TOKENS, STREAMS, DIM, generator=gen).to(torch.bfloat16),
            torch.randn(width, STREAMS * DIM, generator=gen) * 0.05, torch.randn(width, generator=gen) * 0.1,
            torch.rand(3, generator=gen) + 0.5, torch.randn(TOKENS, DIM, generator=gen).to(torch.bfloat16))


def _both_halves(module, streams, fn, base, scale, block_out):
    collapsed, post, comb = module.mix_in(streams, fn, base, scale, **KEYWORDS)
    return collapsed, post, comb, module.mix_out(streams, block_out, post, comb)


def test_consistent_tokens_are_the_same_bits_in_any_batch():
    seed = fresh_seed()
    streams, fn, base, scale, out = _inputs(seed)
    with intra_op_threads(2):
        whole = _both_halves(consistent, streams, fn, base, scale, out)
    gen = torch.Generator().manual_seed(seed)
    with intra_op_threads(1):
        for size in (1, 3, 17, 40):
            start = int(torch.randint(0, TOKENS - size + 1, (1,), generator=gen))
            part = _both_halves(consistent, streams[start:start + size], fn, base, scale, out[start:start + size])
            for name, a, b in zip(("collapsed", "post", "comb", "mixed"), part, whole):
                assert first_bit_difference(a, b[start:start + size]) is None, (seed, size, start, name)


@pytest.mark.parametrize("variant", ("consistent", "fast"))
def test_both_variants_agree_with_float64_and_comb_is_doubly_stochastic(variant):
    seed = fresh_seed()
    streams, fn, base, scale, out = _inputs(seed)
    module = {"consistent": consistent, "fast": fast}[variant]
    got = _both_halves(module, streams, fn, base, scale, out)
    collapsed, post, comb = ref.mix_in(streams, fn, base, scale, **KEYWORDS)
    expected = (collapsed, post, comb, ref.mix_out(streams, out, post, comb))
    for name, a, b in zip(("collapsed", "post", "comb", "mixed"), got, expected):
        error = float((a.double() - b).abs().max() / b.abs().max())
        print(f"{variant} seed {seed}: {name} vs float64 {error:.2e} (tolerance {TOLERANCE[a.dtype]:g})")
        assert error <= TOLERANCE[a.dtype], (seed, name)
    comb = got[2].double()
    columns = float((comb.sum(dim=-2) - 1).abs().max())
    rows = float((comb.sum(dim=-1) - expected[2].sum(dim=-1)).abs().max())
    reference_rows = float((expected[2].sum(dim=-1) - 1).abs().max())
    print(f"{variant} seed {seed}: |column sum - 1| {columns:.1e}, |row sum - float64's| {rows:.1e} "
          f"(float64's own |row sum - 1| {reference_rows:.1e}; tolerance {STOCHASTIC_TOLERANCE:g})")
    assert columns <= STOCHASTIC_TOLERANCE and rows <= STOCHASTIC_TOLERANCE, (seed, columns, rows)


def test_fast_tokens_change_with_the_batch():
    """Negative control: torch.sigmoid's vector and scalar CPU loops round differently, so the fast
    post and pre weights of a token follow its place in the batch."""
    seed = fresh_seed()
    streams, fn, base, scale, out = _inputs(seed)
    whole = _both_halves(fast, streams, fn, base, scale, out)
    differing = 0
    for size in (1, 3):
        part = _both_halves(fast, streams[:size], fn, base, scale, out[:size])
        differing += sum(first_bit_difference(a, b[:size]) is not None for a, b in zip(part, whole))
    print(f"seed {seed}: {differing} of 8 fast outputs of a small batch differ from the same tokens in {TOKENS}")
    assert differing > 0


def test_the_head_collapse_is_batch_invariant_and_near_float64():
    """HyperHead (the model's last collapse): consistent rows alone == in the batch; both variants
    within the bf16 tolerance of float64."""
    seed = fresh_seed()
    gen = torch.Generator().manual_seed(seed)
    streams = torch.randn(TOKENS, STREAMS, DIM, generator=gen).to(torch.bfloat16)
    fn, base = torch.randn(STREAMS, STREAMS * DIM, generator=gen) * 0.05, torch.randn(STREAMS, generator=gen) * 0.1
    scale, keywords = torch.rand(1, generator=gen) + 0.5, {"hc_eps": 1e-6, "norm_eps": 1e-6}
    with intra_op_threads(2):
        whole = consistent.head(streams, fn, base, scale, **keywords)
    with intra_op_threads(1):
        for row in (0, 5, TOKENS - 1):
            alone = consistent.head(streams[row:row + 1], fn, base, scale, **keywords)[0]
            assert first_bit_difference(alone, whole[row]) is None, (seed, row)
    expected = ref.head(streams, fn, base, scale, **keywords)
    for name, got in (("consistent", whole), ("fast", fast.head(streams, fn, base, scale, **keywords))):
        error = float((got.double() - expected).abs().max() / expected.abs().max())
        print(f"seed {seed}: head ({name}) vs float64 {error:.2e} (tolerance {TOLERANCE[torch.bfloat16]:g})")
        assert error <= TOLERANCE[torch.bfloat16]
