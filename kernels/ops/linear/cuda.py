"""linear.consistent on CUDA: the Triton GEMM (triton.py), its launch table, its backward.

The tile and load path may follow M and the shape (they move which program computes an element,
not its K order: benchmarks/gpu_gemm.py checks the bits); K is one slice for every shape. The table
is the device's tuned file (kernels/ops/gemm_tuning.py) or else the built-in H200 winners of
benchmarks/results/h200/gemm/sweep-block-k-20261129.json; fp32 operands (the router) take their own
tiles ("ieee" dots are FMA chains over k). Backward: dx = dy @ w, dw = dy^T @ x by cuBLAS,
deterministic for a fixed shape on one stream; C8 compares gradients with float64 in its tolerance.
"""
import torch

import kernels.ops.linear.triton as linear_triton
from kernels.ops import gemm_tuning
from kernels.ops.autograd_use import records_graph

# (largest M, kernel, (BLOCK_M, BLOCK_N, warps, stages), BLOCK_K) for half-precision operands
_HALF_TILES = (
    (16, "pointer", (16, 64, 4, 4), 128),
    (64, "pointer", (64, 64, 4, 4), 128),
    (128, "pointer", (64, 128, 4, 4), 128),
    (256, "pointer", (128, 64, 4, 4), 128),
    (2048, "pointer", (128, 128, 8, 4), 64),
    (None, "pointer", (256, 128, 8, 3), 64),
)
# fp32 (the router: N = the experts, 128): a decode's M gets 16 x 16 tiles, so that M = 128
# is 64 programs and not 4 (benchmarks/gpu_router_gemm.py checks the bits and times them)
_FP32_TILES = ((256, "pointer", (16, 16, 2, 3), 64), (2048, "pointer", (32, 32, 4, 3), 32),
               (None, "pointer", (64, 64, 4, 3), 32))


def _launch(num_rows: int, n: int, k: int, dtype, device):
    """(kernel, config, block_k) for an [num_rows, k] @ [n, k]^T product."""
    if dtype == torch.float32:
        table = _FP32_TILES
    else:
        tuned = gemm_tuning.table_for(device)
        table = tuned.get((n, k)) or tuned.get(gemm_tuning.DEFAULT) or _HALF_TILES
    for largest, kernel, config, block_k in table:
        if largest is None or num_rows <= largest:
            return kernel, config, block_k
    raise AssertionError("launch tables end with an open bucket")


def _rows_along_k(t):
    """The kernel takes any row stride, only K must be contiguous: a K slice of a weight or
    an activation (a layout's leaf) is read in place, not copied."""
    return t if t.stride(-1) == 1 else t.contiguous()


def forward(x, w, out_dtype=None):
    """x [..., K] @ w[N, K]^T in x's dtype (or out_dtype: fp32 keeps the sums unrounded);
    leading dims are flattened into rows."""
    if w.dtype != x.dtype:
        raise ValueError(f"linear on CUDA: x is {x.dtype}, w is {w.dtype}")
    rows, w = _rows_along_k(x.reshape(-1, x.shape[-1])), _rows_along_k(w)
    kernel, config, block_k = _launch(rows.shape[0], w.shape[0], w.shape[1], x.dtype, x.device)
    if kernel != "pointer" and not linear_triton.tma_ready(rows, w, out_dtype):
        kernel = "pointer"  # a strided leaf the copy engine cannot address: the same tile, loaded by pointers
    y = linear_triton.consistent(rows, w, config=config, block_k=block_k, kernel=kernel, out_dtype=out_dtype)
    return y.reshape(x.shape[:-1] + (w.shape[0],))


class ConsistentLinear(torch.autograd.Function):
    """Forward: the consistent Triton GEMM. Backward: cuBLAS (see the module docstring)."""

    @staticmethod
    def forward(ctx, x, w, out_dtype):
        ctx.save_for_backward(x, w)
        return forward(x, w, out_dtype)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        grad = grad.to(x.dtype)
        grad_x = grad @ w if ctx.needs_input_grad[0] else None
        grad_w = (grad.reshape(-1, grad.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
                  if ctx.needs_input_grad[1] else None)
        return grad_x, grad_w, None


def consistent(x, w, out_dtype=None):
    return ConsistentLinear.apply(x, w, out_dtype) if records_graph(x, w) else forward(x, w, out_dtype)
