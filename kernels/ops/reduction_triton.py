"""Row sums and prefix sums on CUDA through Triton: y = x.sum(-1, keepdim=True), fp32
accumulation, one order per row length (the CUDA backend of kernels/ops/reduction.py's
row_sum); and the inclusive prefix sum of each row (row_prefix_sum).

Consistency: one program owns one row; it walks the row in BLOCK-element steps from
element 0 into a [BLOCK] fp32 vector accumulator (lane i sums elements i, i + BLOCK, ...
in that order), then reduces the vector once with tl.sum. BLOCK and num_warps come from a
fixed table keyed by the row length L alone, so a row's order never follows the number of
rows, its place in the batch or the tensor's leading shape. Exact reference: the float64
sum (gates/reference/ holds it for every family using it: norm, logprob). The prefix sum's
program walks its row in SCAN_BLOCK-element chunks in order: tl.cumsum of the chunk (an
association fixed by SCAN_BLOCK and the warps, never by the rows) plus the carry, which is
the chunk's last prefix, so the sums never decrease along a row of nonnegative values.
Imports Triton, so only CUDA machines (or TRITON_INTERPRET=1 tests) import this file.
"""
import torch
import triton
import triton.language as tl

# (largest row length, BLOCK, num_warps), first match wins; rows longer than every entry
# use the last one. Keyed by L only: never by the number of rows.
BLOCK_TABLE = ((256, 256, 1), (1024, 1024, 4), (4096, 2048, 8), (float("inf"), 4096, 8))


def block_for(length: int) -> tuple:
    """(BLOCK, num_warps) for rows of `length` elements: a function of the length alone."""
    for max_length, block, num_warps in BLOCK_TABLE:
        if length <= max_length:
            return block, num_warps
    raise AssertionError("unreachable: the table ends with an unbounded entry")


@triton.jit(do_not_specialize=["length"])
def _row_sum_kernel(x_ptr, y_ptr, length, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # rows * length may pass 2**31 (16k rows of a 152k vocab)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, length, BLOCK):
        idx = start + offs
        acc += tl.load(x_ptr + row * length + idx, mask=idx < length, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))


SCAN_BLOCK, SCAN_WARPS = 1024, 4


@triton.jit(do_not_specialize=["length"])
def _row_prefix_sum_kernel(x_ptr, y_ptr, length, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    carry = tl.zeros((), dtype=tl.float32)
    for start in range(0, length, BLOCK):
        idx = start + offs
        prefix = tl.cumsum(tl.load(x_ptr + row * length + idx, mask=idx < length, other=0.0), axis=0) + carry
        tl.store(y_ptr + row * length + idx, prefix, mask=idx < length)
        carry = tl.sum(tl.where(offs == BLOCK - 1, prefix, -0.0), axis=0)  # the last prefix, exactly


def row_prefix_sum(x: torch.Tensor) -> torch.Tensor:
    """x [R, L] fp32 -> its inclusive prefix sums along L, each row in an order fixed by L."""
    if x.dtype != torch.float32 or x.dim() != 2:
        raise ValueError(f"row_prefix_sum: x {tuple(x.shape)} {x.dtype}, want [R, L] float32")
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel():
        _row_prefix_sum_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=SCAN_BLOCK, num_warps=SCAN_WARPS)
    return y


def launch(x: torch.Tensor, block: int, num_warps: int) -> torch.Tensor:
    """The kernel with an explicit BLOCK: for row_sum below and for the tests' negative
    control (a BLOCK that follows the row count must be caught). x [R, L] contiguous."""
    rows, length = x.shape
    y = torch.empty((rows,), dtype=x.dtype, device=x.device)
    if rows:
        _row_sum_kernel[(rows,)](x, y, length, BLOCK=block, num_warps=num_warps)
    return y


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """x [..., L] (fp32; fp16/bf16 accumulate in fp32 and round once) -> [..., 1] in x's
    dtype, summed in an order fixed by L alone. Non-contiguous input is copied first."""
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"row_sum: dtype {x.dtype} not supported (float32, float16, bfloat16)")
    length = x.shape[-1]
    if length == 0:
        return x.new_zeros(x.shape[:-1] + (1,))
    rows = x.reshape(-1, length).contiguous()  # a copy only when x is not already row-major
    return launch(rows, *block_for(length)).reshape(x.shape[:-1] + (1,))
