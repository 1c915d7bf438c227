"""The consistent Mamba-2 causal conv + SiLU on CUDA, one Triton kernel (ssm_conv.consistent).

A program per (row, channel block): acc = bias, acc + w[c, k] * window[t + k] for k = 0..K-1 in
fp32, acc * 1 / (1 + exp(-acc)), one rounding; the window (K-1 conv-state rows, then the call's)
is read in place, a decode-only group in one launch (decode_batch). A row's bits depend on its own
K inputs only, in prefill, chunk or decode (CUDA's own bits, not the CPU's). Backward: the torch
form in fp32 (C8's tolerance). Imports Triton: CUDA (or TRITON_INTERPRET=1 tests) only.
"""
import torch
import triton
import triton.language as tl

from kernels.ops.autograd_use import grads_of_recomputed, records_graph

BLOCK_C = 256


@triton.jit
def _conv_silu_kernel(x_ptr, state_ptr, slots_ptr, w_ptr, b_ptr, out_ptr, x_row_stride, channels,
                      K: tl.constexpr, BLOCK: tl.constexpr, DECODE: tl.constexpr):
    row, block = tl.program_id(0), tl.program_id(1)
    c = block * BLOCK + tl.arange(0, BLOCK)
    live = c < channels
    if DECODE:  # one row per sequence: its window is its slot's K-1 state rows, then the row
        state = state_ptr + tl.load(slots_ptr + row) * (K - 1) * channels
        local = 0
    else:  # one sequence's rows: row's window starts `row` rows into (state rows, the rows)
        state = state_ptr
        local = row
    acc = tl.load(b_ptr + c, mask=live, other=0.0).to(tl.float32)
    for k in tl.static_range(K):
        at = local + k + tl.zeros_like(c)  # window row: the K-1 state rows first, then the call's rows
        in_state = at < K - 1
        held = tl.load(state + at * channels + c, mask=live & in_state, other=0.0)
        fresh = tl.load(x_ptr + (row - local + at - (K - 1)) * x_row_stride + c, mask=live & (at >= K - 1), other=0.0)
        tap = tl.where(in_state, held, fresh).to(tl.float32)
        acc = acc + tl.load(w_ptr + c * K + k, mask=live, other=0.0).to(tl.float32) * tap
    out = acc * (1.0 / (1.0 + tl.exp(-acc)))
    tl.store(out_ptr + row * channels + c, out.to(out_ptr.dtype.element_ty), mask=live)
    if DECODE:  # the slot's state moves on a row: state rows 1..K-2, then this row (each read before it is overwritten)
        for k in tl.static_range(K - 1):
            if k + 1 < K - 1:
                moved = tl.load(state + (k + 1) * channels + c, mask=live)
            else:
                moved = tl.load(x_ptr + row * x_row_stride + c, mask=live)
            tl.store(state + k * channels + c, moved, mask=live)


def _launch(xbc, conv_state, weight, bias, slots=None):
    """slots None: one sequence's rows after conv_state [K-1, C]; else one row per sequence,
    conv_state the pool [S, K-1, C] and slots [M] long (the pool moves on a row)."""
    num_rows, channels = xbc.shape
    if xbc.stride(1) != 1:
        xbc = xbc.contiguous()
    out = torch.empty((num_rows, channels), dtype=xbc.dtype, device=xbc.device)
    _conv_silu_kernel[(num_rows, triton.cdiv(channels, BLOCK_C))](
        xbc, conv_state.contiguous(), conv_state if slots is None else slots, weight.contiguous(), bias, out,
        xbc.stride(0), channels, K=weight.shape[-1], BLOCK=BLOCK_C, DECODE=slots is not None)
    return out


def _tail(conv_state, xbc, kernel_size):
    """The next call's conv state: the last K-1 rows of (state rows, the call's rows)."""
    keep = kernel_size - 1
    if xbc.shape[0] >= keep:
        return xbc[xbc.shape[0] - keep:].detach()
    return torch.cat([conv_state[xbc.shape[0]:], xbc.detach()])


class ConsistentConv(torch.autograd.Function):
    """Forward: the Triton kernel. Backward: the torch form recomputed in fp32 and differentiated."""

    @staticmethod
    def forward(ctx, xbc, conv_state, weight, bias):
        ctx.save_for_backward(xbc, conv_state, weight, bias)
        return _launch(xbc, conv_state, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        from kernels.ops.ssm_conv.forms import consistent_taps, window_rows  # the torch form

        def torch_form(xbc, conv_state, weight, bias):
            return consistent_taps(window_rows(conv_state, xbc), weight, bias, xbc.shape[0])
        return grads_of_recomputed(ctx.saved_tensors, ctx.needs_input_grad, torch_form, grad.float())


def decode_batch(xbc, slots, conv_pool, weight, bias):
    """One row per sequence [b, C], each after its slot's K-1 rows of conv_pool [S, K-1, C] (in
    the activation dtype), in one launch: the same terms as a one-row consistent() call; every
    slot's rows move on by the row, in place."""
    if conv_pool.dtype != xbc.dtype or not conv_pool.is_contiguous():
        raise ValueError("ssm_conv on CUDA: the conv pool is contiguous, in the rows' dtype")
    return _launch(xbc, conv_pool, weight, bias, slots)


def consistent(xbc, state, weight, bias):
    """ssm_conv.consistent on CUDA: the rows' conv + SiLU, the state's tail moved on."""
    conv_state = state.conv.to(xbc.dtype)
    out = (ConsistentConv.apply(xbc, conv_state, weight, bias) if records_graph(xbc, weight, bias)
           else _launch(xbc, conv_state, weight, bias))
    state.conv = _tail(conv_state, xbc, weight.shape[-1])
    return out
