"""Gated activation SiLU(gate) * up (Qwen3's MLP), and the position-independent sigmoid.

Consistency: on CPU, torch's vectorized sigmoid/SiLU and the scalar loop for a tensor's tail round
differently, so an element's bits would follow its place in the flattened batch; exp and division
agree in both loops, so the consistent sigmoid is built from them. SiLU(gate) * up is rounded
once, from fp32. Reference: gates/reference/activation.py.
"""
import torch
import torch.nn.functional as F


def position_independent_sigmoid(x):
    """sigmoid(x) = 1 / (1 + exp(-x)) from ops whose vector and scalar loops agree."""
    return (1.0 + torch.exp(-x)).reciprocal()


def fast(gate, up):
    """SiLU and the product each rounded to the activation dtype, as HF and most engines do
    (on CUDA without autograd, one fused Triton kernel: kernels/ops/activation_triton.py)."""
    if gate.device.type == "cuda" and not torch.is_grad_enabled():
        from kernels.ops import activation_triton
        return activation_triton.fast(gate, up)
    return F.silu(gate) * up


def consistent(gate, up):
    """fp32 throughout, one rounding at the end; position independent on CPU. On CUDA one
    Triton kernel for both runtimes (kernels/ops/activation_triton.py)."""
    if gate.device.type == "cuda":
        from kernels.ops import activation_triton
        return activation_triton.consistent(gate, up)
    gate32 = gate.float()
    return (gate32 * position_independent_sigmoid(gate32) * up.float()).to(gate.dtype)
