"""Planted faults in the consistent CUDA kernels (kernels/ops/*/triton.py): a kernel's split or
block constant made to follow the call's row count, the fault a tuned kernel ships (a tile or
split picked per batch), meant for C02 (batch invariance). Each plant runs the shipped Triton
kernel with one argument changed, so the gate sees the constant and nothing else: forward faults
for the engine's cases, on CUDA only (bound elsewhere they refuse with the reason). The attention
walk's and the scan's constants are planted by existing variants bound to one case
(tests/gates/test_triton_plants.py lists them all). Registered by gates/faults.py's register_all.
"""
import importlib

import torch

SMALL_CALL = 16  # rows below which a planted kernel takes its other constant


def kernel_module(name: str, before_folders: str):
    """kernels.ops.<name> ("linear.cuda": the family folders), or kernels.ops.<before_folders>
    ("linear_cuda") in a tree from before them: the judge's gates also run on a base commit's
    kernels (C08's reference side)."""
    try:
        return importlib.import_module(f"kernels.ops.{name}")
    except ModuleNotFoundError:
        return importlib.import_module(f"kernels.ops.{before_folders}")


def _require_cuda(x, name: str) -> None:
    if x.device.type != "cuda":
        raise NotImplementedError(f"planted fault {name}: it plants a constant of a Triton kernel, which runs on "
                                  f"CUDA only; this call is on {x.device.type}")


def linear_triton_split_k_small_m(x, w, *, row_multiple: int, out_dtype=None):
    """The consistent Triton GEMM, but K cut into two slices when the call has fewer than
    SMALL_CALL rows (a split-K for small batches: the count follows M, which the kernel's
    contract forbids)."""
    _require_cuda(x, "linear.planted_triton_split_k_small_m")
    linear_cuda = kernel_module("linear.cuda", "linear_cuda")
    linear_triton = kernel_module("linear.triton", "linear_triton")
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    w = w.contiguous()
    _, config, block_k = linear_cuda._launch(rows.shape[0], w.shape[0], w.shape[1], x.dtype, x.device)
    splits = 2 if rows.shape[0] < SMALL_CALL else 1
    y = linear_triton.consistent(rows, w, config=config, block_k=block_k, num_splits=splits, kernel="pointer",
                                 out_dtype=out_dtype)
    return y.reshape(x.shape[:-1] + (w.shape[0],))


def norm_triton_lanes_by_rows(x, w, *, eps, residual=None):
    """The consistent Triton RMSNorm, but a row's sum of squares spread over half the lanes
    when the call has fewer than SMALL_CALL rows (each lane then adds two elements before the
    tree: another order)."""
    _require_cuda(x, "norm.planted_triton_lanes_by_rows")
    norm_triton = kernel_module("norm.triton", "norm_triton")
    rows = x.numel() // x.shape[-1]
    lanes = max(1, x.shape[-1] // 2) if rows < SMALL_CALL else 0
    return norm_triton.launch(x, w, eps, residual, block=1 << (lanes.bit_length() - 1) if lanes else 0)


def logprob_triton_block_by_rows(logits, targets, temperatures, *, full=False):
    """The consistent log-prob, but its Triton sum over the vocabulary at a quarter of its BLOCK
    when the call has fewer than SMALL_CALL rows (the sum of exp in another order). In a tree
    from before the fused row kernel (kernels/ops/logprob/rows_triton.py), the row sum's BLOCK."""
    _require_cuda(logits, "logprob.planted_triton_block_by_rows")
    x = kernel_module("logprob.forms", "logprob").scaled(logits, temperatures)
    rows = logits.reshape(-1, logits.shape[-1]).shape[0]
    try:
        rows_triton = importlib.import_module("kernels.ops.logprob.rows_triton")
    except ModuleNotFoundError:
        return _logprob_row_sum_block_by_rows(x, targets, rows, full)
    block, num_warps = rows_triton.consistent_launch(logits.shape[-1])
    launch = (max(16, block // 4), num_warps) if rows < SMALL_CALL else None
    lse, logp = rows_triton.consistent_rows(logits, None if full else targets, temperatures, launch=launch)
    return x - lse[:, None] if full else logp


def _logprob_row_sum_block_by_rows(x, targets, rows, full):
    from kernels.ops import reduction_triton
    row_max = x.amax(dim=-1, keepdim=True)
    exps = torch.exp(x - row_max).reshape(-1, x.shape[-1]).contiguous()
    block, num_warps = reduction_triton.block_for(exps.shape[1])
    if rows < SMALL_CALL:
        block = max(16, block // 4)
    lse = row_max + torch.log(reduction_triton.launch(exps, block, num_warps).reshape(row_max.shape))
    return x - lse if full else (x.gather(-1, targets[:, None]) - lse)[:, 0]


PLANTED = {
    ("linear", "planted_triton_split_k_small_m"): linear_triton_split_k_small_m,
    ("norm", "planted_triton_lanes_by_rows"): norm_triton_lanes_by_rows,
    ("logprob", "planted_triton_block_by_rows"): logprob_triton_block_by_rows,
}
