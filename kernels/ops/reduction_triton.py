"""Row sums and prefix sums on CUDA through Triton, fp32, one order per row length (reduction.py).

One program owns one row: it walks it in BLOCK-element steps into a [BLOCK] fp32 accumulator (lane
i sums i, i + BLOCK, ... in order), reduced once by tl.sum; BLOCK and num_warps come from a table
keyed by the row length alone, so the order never follows the row count or place. The prefix sum
walks SCAN_BLOCK chunks in order, tl.cumsum of each plus the carry (the last prefix), so a row of
nonnegative values never decreases. Reference: the float64 sum (gates/reference/: norm, logprob).
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
