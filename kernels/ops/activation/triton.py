"""SiLU(gate) * up on CUDA as one elementwise Triton kernel, both contracts (fast.py, consistent.py).

consistent: fp32 throughout, sigmoid as 1 / (1 + exp(-g)), one rounding at the end; an element's
bits depend on its own two inputs only. fast: SiLU rounded to the activation dtype, then the
product rounded again (as HF and most engines). The consistent trainer's backward differentiates
the fp32 formula in torch ops. Imports Triton: CUDA machines (or TRITON_INTERPRET=1 tests) only.
"""
import torch
import triton
import triton.language as tl

from kernels.ops.autograd_use import records_graph
from kernels.ops.pdl import launch_options, wait_for_inputs

BLOCK = 1024


@triton.jit
def _silu_mul_kernel(gate_ptr, up_ptr, out_ptr, inner, stride_g, stride_u, total, ROUND_SILU: tl.constexpr,
                     BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_for_inputs(PDL)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    row, col = offs // inner, offs % inner
    g = tl.load(gate_ptr + row * stride_g + col, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + row * stride_u + col, mask=mask, other=0.0).to(tl.float32)
    silu = g * (1.0 / (1.0 + tl.exp(-g)))
    if ROUND_SILU:
        silu = silu.to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + offs, (silu * u).to(out_ptr.dtype.element_ty), mask=mask)


def launch(gate, up, round_silu: bool = False):
    """gate, up [M, I] (rows of any stride, unit last stride) -> contiguous [M, I]."""
    if gate.shape != up.shape or gate.dim() != 2:
        raise ValueError(f"silu_mul: gate {tuple(gate.shape)}, up {tuple(up.shape)} (2D, same shape)")
    gate, up = (t if t.stride(-1) == 1 else t.contiguous() for t in (gate, up))
    out = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    total = out.numel()
    if total:
        _silu_mul_kernel[(triton.cdiv(total, BLOCK),)](gate, up, out, gate.shape[1], gate.stride(0), up.stride(0),
                                                       total, ROUND_SILU=round_silu, BLOCK=BLOCK, num_warps=4,
                                                       **launch_options(gate.device))
    return out


class ConsistentSiluMul(torch.autograd.Function):
    """Forward: the kernel. Backward: the fp32 formula differentiated in torch ops."""

    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return launch(gate, up)

    @staticmethod
    def backward(ctx, grad):
        gate, up = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [gate.detach().float().requires_grad_(), up.detach().float().requires_grad_()]
            g32, u32 = leaves
            grads = torch.autograd.grad(g32 * torch.sigmoid(g32) * u32, leaves, grad.float())
        return grads[0].to(gate.dtype), grads[1].to(up.dtype)


def consistent(gate, up):
    return ConsistentSiluMul.apply(gate, up) if records_graph(gate, up) else launch(gate, up)


def fast(gate, up):
    return launch(gate, up, round_silu=True)
