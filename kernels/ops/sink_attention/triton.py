"""sink_attention's consistent form on CUDA: one Triton program per (query, head), both runtimes.

On CUDA torch picks a reduction's layout from the whole shape, so consistent.py's `.sum(dim=-1)`
would follow the batch there. Here a program walks its query's L entries in BLOCK_L steps: pass
one takes the max of the scores (exact in any order), pass two adds exp(s - top) lane by lane
and the weighted entries into a [BLOCK_D] fp32 accumulator, each score a tl.sum over BLOCK_D.
Every order is fixed by (L, D) alone, and L is the config's (consistent.py's layout), so a
query's bits follow neither the batch nor the phase. out = (sum_l w_l e_l) / (sum_l w_l +
exp(sink - top)): the torch form's terms, another rounding. The trainer's backward
differentiates the torch form. Imports Triton: CUDA machines (or TRITON_INTERPRET=1 tests) only.
"""
import torch
import triton
import triton.language as tl

from kernels.ops.autograd_use import grads_of_recomputed, records_graph
from kernels.ops.sink_attention.forms import torch_form

BLOCK_L = 16


@triton.jit
def _block_scores(q, e_ptr, valid_ptr, token, start, length, head_dim, dims, in_dim, scale, BLOCK_L: tl.constexpr):
    """(live [BLOCK_L], entries [BLOCK_L, BLOCK_D] fp32, scores [BLOCK_L]) of the entries from `start`:
    both passes call it, so both read the same scores."""
    slots = start + tl.arange(0, BLOCK_L)
    live = tl.load(valid_ptr + token * length + slots, mask=slots < length, other=0) != 0
    e = tl.load(e_ptr + (token * length + slots[:, None]) * head_dim + dims[None, :],
                mask=(slots[:, None] < length) & in_dim[None, :], other=0.0).to(tl.float32)
    return live, e, tl.sum(e * q[None, :], axis=1) * scale


@triton.jit(do_not_specialize=["length"])
def _sink_attention_kernel(q_ptr, e_ptr, valid_ptr, sink_ptr, out_ptr, length, num_heads, head_dim, scale,
                           BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr):
    token, head = tl.program_id(0).to(tl.int64), tl.program_id(1)
    dims = tl.arange(0, BLOCK_D)
    in_dim = dims < head_dim
    q = tl.load(q_ptr + (token * num_heads + head) * head_dim + dims, mask=in_dim, other=0.0).to(tl.float32)
    sink = tl.load(sink_ptr + head).to(tl.float32)
    top = sink
    for start in range(0, length, BLOCK_L):  # pass one: the max, exact in any order
        live, _, scores = _block_scores(q, e_ptr, valid_ptr, token, start, length, head_dim, dims, in_dim, scale,
                                        BLOCK_L)
        top = tl.maximum(top, tl.max(tl.where(live, scores, float("-inf")), axis=0))
    sums = tl.zeros((BLOCK_L,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for start in range(0, length, BLOCK_L):  # pass two: the weights and the weighted entries, in order
        live, e, scores = _block_scores(q, e_ptr, valid_ptr, token, start, length, head_dim, dims, in_dim, scale,
                                        BLOCK_L)
        weights = tl.where(live, tl.exp(scores - top), 0.0)  # a masked entry weighs exactly +0.0
        sums += weights
        acc += tl.sum(weights[:, None] * e, axis=0)
    total = tl.sum(sums, axis=0) + tl.exp(sink - top)
    tl.store(out_ptr + (token * num_heads + head) * head_dim + dims, (acc / total).to(out_ptr.dtype.element_ty),
             mask=in_dim)


def launch(q, entries, valid, sinks, *, scale):
    """q [T, H, D], entries [T, L, D] (K = V), valid [T, L] bool, sinks [H] -> [T, H, D] in q's dtype."""
    tokens, heads, dim = q.shape
    if entries.dim() != 3 or entries.shape[0] != tokens or entries.shape[2] != dim or valid.shape != entries.shape[:2]:
        raise ValueError(f"sink_attention: q {tuple(q.shape)}, entries {tuple(entries.shape)}, "
                         f"valid {tuple(valid.shape)}")
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if q.numel():
        _sink_attention_kernel[(tokens, heads)](q.contiguous(), entries.contiguous(), valid.contiguous(),
                                                sinks.contiguous(), out, entries.shape[1], heads, dim, float(scale),
                                                BLOCK_L=BLOCK_L, BLOCK_D=max(16, triton.next_power_of_2(dim)),
                                                num_warps=4)
    return out


class _SinkAttention(torch.autograd.Function):
    """Forward: the kernel. Backward: the torch form (forms.py) differentiated at the saved inputs."""

    @staticmethod
    def forward(ctx, q, entries, valid, sinks, scale):
        ctx.save_for_backward(q, entries, valid, sinks)
        ctx.scale = scale
        return launch(q, entries, valid, sinks, scale=scale)

    @staticmethod
    def backward(ctx, grad):
        q, entries, valid, sinks = ctx.saved_tensors
        needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], False, ctx.needs_input_grad[3])
        grads = grads_of_recomputed((q, entries, valid, sinks), needs,
                                    lambda *inputs: torch_form(*inputs, scale=ctx.scale), grad)
        return (*grads, None)


def consistent(q, entries, valid, sinks, *, scale):
    if records_graph(q, entries, sinks):
        return _SinkAttention.apply(q, entries, valid, sinks, scale)
    return launch(q, entries, valid, sinks, scale=scale)
