"""activation.consistent: SiLU(gate) * up in fp32 with a sigmoid built from exp and division
(whose vector and scalar loops agree on CPU), rounded once; on CUDA one Triton kernel (triton.py).
The position-independent sigmoid also serves gated_norm, router and ssm_conv; the softplus, ssm_scan's
dt and router's sqrt-softplus scores.
"""
import torch


def position_independent_sigmoid(x):
    """sigmoid(x) = 1 / (1 + exp(-x)) from ops whose vector and scalar loops agree."""
    return (1.0 + torch.exp(-x)).reciprocal()


def position_independent_softplus(x):
    """softplus with torch's threshold (x > 20 -> x), from exp and log, whose vector and
    scalar loops agree on CPU (F.softplus's do not)."""
    return torch.where(x > 20.0, x, torch.log(1.0 + torch.exp(x)))


def consistent(gate, up):
    """fp32 throughout, one rounding at the end; position independent on CPU. On CUDA one
    Triton kernel for both runtimes (kernels/ops/activation/triton.py)."""
    if gate.device.type == "cuda":
        import kernels.ops.activation.triton as activation_triton
        return activation_triton.consistent(gate, up)
    gate32 = gate.float()
    return (gate32 * position_independent_sigmoid(gate32) * up.float()).to(gate.dtype)


def sigmoid_gate(x, gate):
    """x * sigmoid(gate) in fp32 with the position-independent sigmoid, rounded once (gate [M, N]
    or [M, 1], broadcast over x's columns)."""
    return (x.float() * position_independent_sigmoid(gate.float())).to(x.dtype)
