"""The one GEMM call both linear contracts make on CPU: half precision through fp32, rounded
once (bf16 products are exact in fp32); fast.py calls it whole, consistent.py per row tile."""
import torch
import torch.nn.functional as F


def _blas(x, w, out_dtype=None):
    """One GEMM call; half precision goes through fp32 on CPU (see the module docstring).
    out_dtype=torch.float32 keeps the fp32 sums unrounded (a layout's partials)."""
    half = x.dtype in (torch.bfloat16, torch.float16)
    if half and (x.device.type == "cpu" or out_dtype == torch.float32):
        return F.linear(x.float(), w.float()).to(out_dtype or x.dtype)
    return F.linear(x, w)
