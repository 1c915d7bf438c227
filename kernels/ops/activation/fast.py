"""activation.fast: SiLU and the product each rounded to the activation dtype, as HF and most
engines run them."""
import torch
import torch.nn.functional as F


def fast(gate, up):
    """SiLU and the product each rounded to the activation dtype, as HF and most engines do
    (on CUDA without autograd, one fused Triton kernel: kernels/ops/activation/triton.py)."""
    if gate.device.type == "cuda" and not torch.is_grad_enabled():
        import kernels.ops.activation.triton as activation_triton
        return activation_triton.fast(gate, up)
    return F.silu(gate) * up


def sigmoid_gate(x, gate):
    """x * sigmoid(gate) in the activation dtype, as transformers' Qwen3.5 runs it (two roundings)."""
    return x * torch.sigmoid(gate.to(x.dtype))
