"""DeepSeek-V4's KV compressors (kernels/ops/window_compress/), CSA (overlapping, 2m slots) and HCA:
under the consistent variant a prompt compressed whole (two threads) gives the same block bits
as split at random points, at window boundaries, or token by token (one thread), the state carrying
the unfinished window and the last Ca half; the fast prefill and decode differ from each other
(negative control, with its size); every variant is within a stated tolerance of float64."""
import pytest
import torch

from gates.case_calls import intra_op_threads
from gates.compare import first_bit_difference
from gates.inputs import fresh_seed
from gates.reference.window_compress import blocks as reference_blocks
from kernels.ops.window_compress.consistent import consistent
from kernels.ops.window_compress.fast import fast_decode, fast_prefill
from kernels.ops.window_compress.forms import WindowState

LENGTH, DIM = 61, 16  # ends mid-window for both rates
KINDS = {"csa": (4, True), "hca": (8, False)}  # rate, overlap
REFERENCE_TOLERANCE = 1e-5  # relative to max |block|: the consistent fp32 softmax and sums vs float64
FAST_TOLERANCE = 1e-2  # the fast prefill rounds its softmax weights to bf16


def _inputs(kind):
    """(seed, kv, gate, position_bias, the variants' keywords) of a fresh draw for one compressor."""
    rate, overlap = KINDS[kind]
    seed = fresh_seed()
    gen = torch.Generator().manual_seed(seed)
    width = 2 * DIM if overlap else DIM
    return (seed, torch.randn(LENGTH, width, generator=gen).to(torch.bfloat16),
            torch.randn(LENGTH, width, generator=gen).to(torch.bfloat16) * 2,
            torch.randn(rate, width, generator=gen) * 0.5, {"rate": rate, "overlap": overlap})


def _in_calls(variant, kv, gate, bias, cuts, **keywords):
    """The blocks of every call, concatenated, and the final state: calls split at `cuts`."""
    out, state, edges = [], WindowState(), [0, *cuts, kv.shape[0]]
    for start, end in zip(edges, edges[1:]):
        blocks, state = variant(kv[start:end], gate[start:end], bias, state, **keywords)
        out.append(blocks)
    return torch.cat(out), state


@pytest.mark.parametrize("kind", KINDS)
def test_consistent_blocks_are_the_same_bits_however_the_prompt_is_split(kind):
    seed, kv, gate, bias, keywords = _inputs(kind)
    rate = keywords["rate"]
    with intra_op_threads(2):
        whole, state = consistent(kv, gate, bias, WindowState(), **keywords)
    assert whole.shape[0] == LENGTH // rate and state.emitted == LENGTH // rate
    assert state.pending_kv.shape[0] == LENGTH % rate  # the unfinished window is kept
    gen = torch.Generator().manual_seed(seed)
    splits = {"at boundaries": list(range(rate, LENGTH, 2 * rate)),
              "mid-window": sorted(torch.randperm(LENGTH - 1, generator=gen)[:6].add(1).tolist()),
              "token by token": list(range(1, LENGTH))}
    with intra_op_threads(1):
        for name, cuts in splits.items():
            split, _ = _in_calls(consistent, kv, gate, bias, cuts, **keywords)
            assert first_bit_difference(split, whole) is None, (seed, kind, name, cuts)
    error = float((whole.double() - reference_blocks(kv, gate, bias, **keywords)).abs().max() / whole.abs().max())
    print(f"{kind} seed {seed}: consistent vs float64 {error:.2e} (tolerance {REFERENCE_TOLERANCE:g})")
    assert error <= REFERENCE_TOLERANCE


@pytest.mark.parametrize("kind", KINDS)
def test_fast_prefill_and_decode_differ(kind):
    seed, kv, gate, bias, keywords = _inputs(kind)
    prefill, _ = fast_prefill(kv, gate, bias, WindowState(), **keywords)
    decode, _ = _in_calls(fast_decode, kv, gate, bias, [8], **keywords)
    expected = reference_blocks(kv, gate, bias, **keywords)
    for name, blocks in (("prefill", prefill), ("decode", decode)):
        error = float((blocks.double() - expected).abs().max() / expected.abs().max())
        assert error <= FAST_TOLERANCE, (seed, kind, name, error)
    differing = int((prefill.view(torch.int32) != decode.view(torch.int32)).any(-1).sum())
    print(f"{kind} seed {seed}: fast prefill and decode differ on {differing} of {prefill.shape[0]} blocks")
    assert differing > 0
