"""ssm_conv.consistent: the K taps added one by one in fp32 in a fixed order, elementwise, SiLU by
the position-independent sigmoid, one rounding; on CUDA one Triton kernel (triton.py), a
decode-only group in one launch.
"""
from kernels.ops.ssm_conv.forms import _decode_window, _keep_tail, _window, consistent_taps
from kernels.ops.state_segments import batched_decode, each_segment


def consistent(xbc, segments, store, weight, bias):
    """Taps accumulated in fp32 in order k = 0..K-1, one rounding after the SiLU. On CUDA one
    Triton kernel (kernels/ops/ssm_conv/triton.py) does the same terms, where these are ~24 ops
    a segment, and a decode-only group is one launch for every sequence."""
    if xbc.device.type == "cuda":
        import kernels.ops.ssm_conv.triton as ssm_conv_triton  # imports Triton: CUDA machines only
        if batched_decode(segments, store):
            return ssm_conv_triton.decode_batch(xbc, store.decode_slots(segments), store.conv, weight, bias)
        return each_segment(ssm_conv_triton.consistent, segments, store, (xbc,), weight, bias)
    if batched_decode(segments, store):  # every sequence's row in the same elementwise ops
        window = _decode_window(xbc, segments, store)
        return consistent_taps(window.transpose(0, 1), weight, bias, 1)[0].to(xbc.dtype)
    return each_segment(consistent_segment, segments, store, (xbc,), weight, bias)


def consistent_segment(xbc, state, weight, bias):
    """The consistent conv of one segment in torch ops (the CPU form)."""
    window = _window(xbc, state)
    _keep_tail(state, window, weight.shape[-1])
    return consistent_taps(window, weight, bias, xbc.shape[0]).to(xbc.dtype)
