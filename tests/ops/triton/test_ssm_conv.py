"""Logic tests of the SSM's causal conv (kernels/ops/ssm_conv/triton.py) on CPU through the
Triton interpreter: prefill, chunked prefill and decodes agree bit for bit and match the torch
form (gradients bit for bit); the engine's batched decode is each sequence's one-row calls.
They prove logic, not GPU bits: benchmarks/gpu_kernel_check.py checks the bits on the device.
The checks (check_*) run in a child pytest with TRITON_INTERPRET=1 (tests/ops/triton/interpreter.py
says why). Negative control: two sequences' pool slots swapped give each the other's outputs.
"""
import torch

from gates.compare import assert_bitwise_equal, first_bit_difference
from tests.ops.triton.interpreter import import_kernel, pooled_store, run_checks


def test_ssm_conv_kernels_under_the_triton_interpreter(fresh_seed):
    """Runs this module's check_* functions (SSM conv) in a child pytest with TRITON_INTERPRET=1."""
    run_checks(__file__, fresh_seed)


def _conv_run(conv_segment, xbc, weight, bias, splits):
    """The conv of xbc's rows in segments of `splits` by conv_segment (ssm_conv/triton.py's consistent
    or the torch form, ssm_conv/consistent.py's consistent_segment), the state carried: every row's output."""
    from kernels.models.mamba_state import MambaSequenceState
    state = MambaSequenceState(conv=torch.zeros(weight.shape[1] - 1, xbc.shape[1], dtype=xbc.dtype),
                               ssm=torch.zeros(1))
    outputs, start = [], 0
    for length in splits:
        outputs.append(conv_segment(xbc[start:start + length], state, weight, bias))
        start += length
    return torch.cat(outputs)


def check_ssm_conv_phases_agree_and_match_the_torch_form(fresh_seed):
    """The CUDA conv: prefill == chunked prefill (pieces shorter than the state, too) ==
    one-token decodes, bit for bit; rows read from a wider projection in place; the torch
    form within 1e-6 (printed); its gradients are the torch form's."""
    kernel = import_kernel("ssm_conv.triton")
    from kernels.ops.ssm_conv.consistent import consistent_segment
    g = torch.Generator().manual_seed(fresh_seed)
    projected = torch.randn(24, 300 + 7, generator=g)
    xbc, weight, bias = projected[:, 7:], torch.randn(300, 4, generator=g) * 0.5, torch.randn(300, generator=g) * 0.1
    whole = _conv_run(kernel.consistent, xbc, weight, bias, [24])
    for pieces in ([2, 1, 5, 10], [3]):
        splits = pieces + [1] * (24 - sum(pieces))
        assert_bitwise_equal(_conv_run(kernel.consistent, xbc, weight, bias, splits), whole,
                             f"splits {pieces} seed={fresh_seed}")
    torch_form = _conv_run(consistent_segment, xbc, weight, bias, [24])
    error = float((whole - torch_form).abs().max() / torch_form.abs().max())
    print(f"ssm conv (Triton) vs the torch form: max |error| / max |y| = {error:.2e}")
    assert error < 1e-6, f"error {error} seed={fresh_seed}"
    leaves = [t.clone().requires_grad_(True) for t in (xbc, weight, bias)]
    weight_out = torch.randn(24, 300, generator=g)
    grads = [torch.autograd.grad((_conv_run(form, *leaves, [24]) * weight_out).sum(), leaves)
             for form in (kernel.consistent, consistent_segment)]
    for name, ours, torch_grad in zip(("xbc", "weight", "bias"), *grads):
        assert_bitwise_equal(ours, torch_grad, f"d/d{name} seed={fresh_seed}")


def check_ssm_conv_batched_decode_is_the_segment_bits(fresh_seed):
    """The engine's batched conv decode (one launch, each row after its slot's K-1 rows of the
    conv pool, the pool moved on in place) equals each sequence's one-row calls, bit for bit,
    outputs and conv rows; a row read from a wider projection in place. Negative control: two
    sequences' slots swapped give each the other's outputs."""
    kernel = import_kernel("ssm_conv.triton")
    from kernels.models.batch import Segment
    g = torch.Generator().manual_seed(fresh_seed)
    weight, bias = torch.randn(300, 4, generator=g) * 0.5, torch.randn(300, generator=g) * 0.1
    lengths, decodes = [1, 2, 3, 9], 6
    streams = [torch.randn(n + decodes, 300 + 7, generator=g)[:, 7:] for n in lengths]
    alone = [_conv_run(kernel.consistent, xbc, weight, bias, [n] + [1] * decodes) for xbc, n in zip(streams, lengths)]

    def batched(swap=False):
        store = pooled_store(300, 4, torch.float32)
        outputs = {seq: [] for seq in range(len(lengths))}
        for seq, (xbc, n) in enumerate(zip(streams, lengths)):
            outputs[seq].append(kernel.consistent(xbc[:n], store.open(Segment(seq, 0, n, 0, "engine_prefill")),
                                                  weight, bias))
            store.held(seq).folded = n  # the positions a scan would have moved on (conv moves none)
        for t in range(decodes):
            segments = tuple(Segment(seq, n + t, 1, seq, "engine_decode") for seq, n in enumerate(lengths))
            slots = store.decode_slots(segments)
            if swap:
                slots = slots[[1, 0, 2, 3]]
            rows = torch.cat([xbc[n + t:n + t + 1] for xbc, n in zip(streams, lengths)])
            out = kernel.decode_batch(rows, slots, store.conv, weight, bias)
            store.settle(segments, keeps_unfinished_chunk=False)
            for seq in outputs:
                outputs[seq].append(out[seq:seq + 1])
        return [torch.cat(parts) for _, parts in sorted(outputs.items())], store

    together, store = batched()
    for seq, (xbc, n) in enumerate(zip(streams, lengths)):
        assert_bitwise_equal(together[seq], alone[seq], f"sequence {seq} (prompt {n}) seed={fresh_seed}")
        assert_bitwise_equal(store.conv[store.held(seq).slot], xbc[n + decodes - 3:n + decodes], f"conv rows {seq}")
    swapped, _ = batched(swap=True)
    assert first_bit_difference(swapped[0][lengths[0]:], alone[0][lengths[0]:]) is not None, "control"
