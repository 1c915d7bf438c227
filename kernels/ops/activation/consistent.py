"""activation.consistent: SiLU(gate) * up in fp32 with a sigmoid built from exp and division
(whose vector and scalar loops agree on CPU), rounded once; on CUDA one Triton kernel (triton.py).
The position-independent sigmoid also serves gated_norm, router and ssm_conv.
"""
import torch


def position_independent_sigmoid(x):
    """sigmoid(x) = 1 / (1 + exp(-x)) from ops whose vector and scalar loops agree."""
    return (1.0 + torch.exp(-x)).reciprocal()


def consistent(gate, up):
    """fp32 throughout, one rounding at the end; position independent on CPU. On CUDA one
    Triton kernel for both runtimes (kernels/ops/activation/triton.py)."""
    if gate.device.type == "cuda":
        import kernels.ops.activation.triton as activation_triton
        return activation_triton.consistent(gate, up)
    gate32 = gate.float()
    return (gate32 * position_independent_sigmoid(gate32) * up.float()).to(gate.dtype)
