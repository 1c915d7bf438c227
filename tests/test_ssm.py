"""Mamba-2 conv + scan + gated norm: prefill == chunked prefill (splits before, at and after
chunk boundaries) == token-by-token decode == trainer, per position, bit for bit, under the
consistent variants; the fast recurrent decode differs (negative control); the consistent
chunked form agrees with the float64 recurrence within a stated tolerance."""
import pytest
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from gates.reference import ssm as reference
from kernels.models.batch import Segment
from kernels.models.state import MambaStateStore
from kernels.ops import gated_norm, ssm_conv, ssm_scan

HEADS, HEAD_DIM, GROUPS, STATE, KERNEL, CHUNK = 4, 8, 2, 16, 4, 16
CONV_DIM = HEADS * HEAD_DIM + 2 * GROUPS * STATE
LENGTH = 70  # crosses four chunk boundaries and ends mid-chunk
REFERENCE_TOLERANCE = 1e-4  # relative to max |y|, fp32 chunked vs float64 recurrence


def _inputs(seed, dtype):
    g = torch.Generator().manual_seed(seed)
    return {
        "xbc": torch.randn(LENGTH, CONV_DIM, generator=g).to(dtype),
        "dt_raw": torch.randn(LENGTH, HEADS, generator=g).to(dtype),
        "z": torch.randn(LENGTH, HEADS * HEAD_DIM, generator=g).to(dtype),
        "conv_w": (torch.randn(CONV_DIM, KERNEL, generator=g) * 0.5).to(dtype),
        "conv_b": (torch.randn(CONV_DIM, generator=g) * 0.1).to(dtype),
        "dt_bias": (torch.randn(HEADS, generator=g) * 0.5 - 1.0).to(dtype),
        "A_log": torch.rand(HEADS, generator=g).log1p().to(torch.float32),
        "D": torch.randn(HEADS, generator=g).to(dtype),
        "norm_w": (1.0 + 0.1 * torch.randn(HEADS * HEAD_DIM, generator=g)).to(dtype),
    }


def _mixer(inputs, splits, conv, scan):
    """Run the sequence in segments of the given lengths; per-position gated-norm outputs."""
    store = MambaStateStore(conv_rows=KERNEL - 1, conv_dim=CONV_DIM, num_heads=HEADS,
                            head_dim=HEAD_DIM, state_size=STATE, dtype=inputs["xbc"].dtype)
    outputs, start = [], 0
    for length in splits:
        rows = slice(start, start + length)
        state = store.open(Segment(0, start, length, 0, "engine_prefill"))
        xbc = conv(inputs["xbc"][rows], state, inputs["conv_w"], inputs["conv_b"])
        x, B, C = xbc.split([HEADS * HEAD_DIM, GROUPS * STATE, GROUPS * STATE], dim=-1)
        y = scan(x.reshape(length, HEADS, HEAD_DIM), B.reshape(length, GROUPS, STATE),
                 C.reshape(length, GROUPS, STATE), inputs["dt_raw"][rows], state,
                 inputs["dt_bias"], inputs["A_log"], inputs["D"], chunk_size=CHUNK)
        outputs.append(gated_norm.consistent(y.reshape(length, -1), inputs["z"][rows],
                                             inputs["norm_w"], eps=1e-5, group_size=HEADS * HEAD_DIM // GROUPS))
        start += length
    return torch.cat(outputs)


def _splits(pieces):
    """Segment lengths: the given pieces, then one-token decodes to LENGTH."""
    return list(pieces) + [1] * (LENGTH - sum(pieces))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_consistent_mixer_is_phase_consistent(dtype, fresh_seed):
    inputs = _inputs(fresh_seed, dtype)
    prefill = _mixer(inputs, [LENGTH], ssm_conv.consistent, ssm_scan.consistent)
    schedules = {
        "decode from 1": _splits([1]), "prefill 15 then decode": _splits([15]),
        "prefill 16 then decode": _splits([16]), "prefill 17 then decode": _splits([17]),
        "chunks 5,11,16,17,21": [5, 11, 16, 17, 21], "chunks 31,1,1,37": [31, 1, 1, 37],
        "chunks 32,33,5": [32, 33, 5], "chunks of 7": [7] * 10,
    }
    for name, splits in schedules.items():
        assert sum(splits) == LENGTH
        assert_bitwise_equal(_mixer(inputs, splits, ssm_conv.consistent, ssm_scan.consistent), prefill,
                             f"{dtype} {name} vs one prefill, seed {fresh_seed}")


def test_fast_recurrent_decode_differs_from_chunked_prefill(fresh_seed):
    inputs = _inputs(fresh_seed, torch.float32)
    prefill = _mixer(inputs, [LENGTH], ssm_conv.fast_conv1d, ssm_scan.fast_chunked)
    decode = _mixer(inputs, _splits([1]), ssm_conv.fast_window_sum, ssm_scan.fast_recurrent)
    difference = first_bit_difference(decode, prefill)
    print("fast decode vs fast prefill:", difference)
    assert difference is not None, f"negative control: fast decode equalled prefill, seed {fresh_seed}"
    chunked = _mixer(inputs, [5, 11, 16, 17, 21], ssm_conv.fast_conv1d, ssm_scan.fast_chunked)
    assert first_bit_difference(chunked, prefill) is not None, "fast chunked prefill at other splits should differ"


def test_consistent_scan_agrees_with_the_float64_recurrence(fresh_seed):
    inputs = _inputs(fresh_seed, torch.float32)
    store = MambaStateStore(conv_rows=KERNEL - 1, conv_dim=CONV_DIM, num_heads=HEADS,
                            head_dim=HEAD_DIM, state_size=STATE, dtype=torch.float32)
    state = store.open(Segment(0, 0, LENGTH, 0, "trainer_fwd"))
    xbc = ssm_conv.consistent(inputs["xbc"], state, inputs["conv_w"], inputs["conv_b"])
    expected_xbc = reference.conv_silu(inputs["xbc"], inputs["conv_w"], inputs["conv_b"])
    conv_error = float((xbc.double() - expected_xbc).abs().max() / expected_xbc.abs().max())
    x, B, C = xbc.split([HEADS * HEAD_DIM, GROUPS * STATE, GROUPS * STATE], dim=-1)
    args = (x.reshape(LENGTH, HEADS, HEAD_DIM), B.reshape(LENGTH, GROUPS, STATE), C.reshape(LENGTH, GROUPS, STATE))
    y = ssm_scan.consistent(*args, inputs["dt_raw"], state, inputs["dt_bias"], inputs["A_log"], inputs["D"],
                            chunk_size=CHUNK)
    expected = reference.scan(*args, inputs["dt_raw"], inputs["dt_bias"], inputs["A_log"], inputs["D"])
    error = float((y.double() - expected).abs().max() / expected.abs().max())
    print(f"conv rel error {conv_error:.2e}, scan rel error {error:.2e} (tolerance {REFERENCE_TOLERANCE})")
    assert conv_error < REFERENCE_TOLERANCE and error < REFERENCE_TOLERANCE, (conv_error, error, fresh_seed)
    assert state.folded == 64 and state.pending[0].shape[0] == LENGTH - 64


def test_state_store_refuses_a_segment_at_the_wrong_position():
    store = MambaStateStore(conv_rows=3, conv_dim=8, num_heads=2, head_dim=2, state_size=2, dtype=torch.float32)
    store.open(Segment(0, 0, 4, 0, "engine_prefill"))
    with pytest.raises(ValueError, match="state is at 0, segment starts at 4"):
        store.open(Segment(0, 4, 1, 0, "engine_decode"))
