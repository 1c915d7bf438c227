"""gated_norm.consistent: fp32 from the scan's fp32 output to the end, the position-independent
sigmoid, a fixed-order group sum (kernels/ops/reduction.py), one rounding; the gate before the norm
(Mamba-2) or after it (Gated DeltaNet)."""

from kernels.ops.activation.consistent import position_independent_sigmoid
from kernels.ops.norm.consistent import rms_normalized


def consistent(y, z, w, *, eps, group_size):
    """fp32 from the scan output to the end; one rounding."""
    z32 = z.float()
    h = y.float() * (z32 * position_independent_sigmoid(z32))
    normed = rms_normalized(h.reshape(*h.shape[:-1], -1, group_size), eps)
    return (normed.reshape(h.shape) * w.float()).to(z.dtype)


def gate_after(y, z, w, *, eps):
    """y, z [M, H, V], w [V]: y normalised over V, times w and silu(z), fp32 to the end; one rounding."""
    z32 = z.float()
    return (rms_normalized(y.float(), eps) * w.float() * (z32 * position_independent_sigmoid(z32))).to(z.dtype)
