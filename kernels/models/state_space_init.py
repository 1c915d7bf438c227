"""Seeded initial values of a state-space layer's parameters, as Mamba-2 and Gated DeltaNet
initialise them: the decay A = exp(A_log) uniform in [low, high], dt = softplus(dt_bias) log-uniform
in [1e-3, 1e-1] (so dt_bias is its inverse softplus), the conv taps uniform in [-0.5, 0.5). `u` is
a float64 draw uniform in [0, 1) of the parameter's shape."""
import math

import torch


def state_space_value(leaf: str, u: torch.Tensor, a_range: tuple) -> torch.Tensor | None:
    """The initial value of parameter `leaf` from `u`, or None where it is not a state-space one."""
    if leaf == "A_log":
        low, high = a_range
        return torch.log(low + (high - low) * u)
    if leaf == "dt_bias":
        dt = torch.exp(math.log(1e-3) + u * (math.log(1e-1) - math.log(1e-3)))
        return dt + torch.log(-torch.expm1(-dt))
    if leaf == "conv_weight":
        return u - 0.5
    return None
