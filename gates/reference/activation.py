"""Float64 reference of the gated activation: SiLU(gate) * up = gate * sigmoid(gate) * up."""
import torch


def silu_mul(gate, up):
    """Elementwise, float64."""
    gate64 = gate.double()
    return gate64 * torch.sigmoid(gate64) * up.double()
