"""norm.consistent: the residual sum rounded first, the sum of squares in an order fixed by the
row's length (kernels/ops/reduction.py), the output rounded once from fp32; on CUDA one Triton
kernel per call (triton.py)."""
import torch

from kernels.ops.reduction import row_sum


def rms_normalized(h32, eps):
    """h32 / RMS(h32), no weight: the sum of squares in an order fixed by the row's length."""
    variance = row_sum(h32 * h32) / h32.shape[-1]
    return h32 * torch.rsqrt(variance + eps)


def _normalize_fp32(h32, w, eps):
    return rms_normalized(h32, eps) * w.float()


def consistent(x, w, *, eps, residual=None):
    """The residual sum rounded first, then the norm from fp32, one rounding. On CUDA one
    Triton kernel per call for both runtimes (kernels/ops/norm/triton.py)."""
    if x.device.type == "cuda":
        import kernels.ops.norm.triton as norm_triton
        return norm_triton.consistent(x, w, eps=eps, residual=residual)
    h = x if residual is None else x + residual
    return _normalize_fp32(h.float(), w, eps).to(x.dtype), (None if residual is None else h)
