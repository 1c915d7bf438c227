"""Grouped GEMM on CUDA through Triton for the MoE experts: y[p] = x[p] @ w[e(p)]^T, one launch.

Rows are sorted by expert. Every element is reduced over K by linear/triton.py's own slice loop
(`_slice_sum`, one slice): from zero in BLOCK_K steps into one fp32 accumulator, then `0.0 + sum`
(the looped kernel's start, so even a zero's sign agrees) and one rounding. Which rows share a
tile moves which program computes a row, not its reduction order, so a row's bits equal
linear.consistent's (checked bit for bit against the per-expert loop). Programs find their expert
on the device (no host sync). Imports Triton, so only CUDA machines import this file.
"""
import torch
import triton
import triton.language as tl

from kernels.ops.linear.triton import _slice_sum


@triton.jit
def _grouped_gemm_kernel(x_ptr, w_ptr, y_ptr, starts_ptr, counts_ptr, tile_ends_ptr, N, K,
                         stride_xm, stride_we, stride_wn, NUM_EXPERTS: tl.constexpr,
                         EXPERTS_POW2: tl.constexpr, K_PER_SPLIT: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    tile = tl.program_id(0)
    pid_n = tl.program_id(1)
    experts = tl.arange(0, EXPERTS_POW2)
    ends = tl.load(tile_ends_ptr + experts, mask=experts < NUM_EXPERTS, other=2 ** 30)
    if tile >= tl.load(tile_ends_ptr + NUM_EXPERTS - 1):
        return  # the grid is an upper bound on the tiles
    expert = tl.sum((ends <= tile).to(tl.int32), axis=0)
    count = tl.load(counts_ptr + expert)
    first_tile = tl.load(tile_ends_ptr + expert) - tl.cdiv(count, BLOCK_M)
    row0 = tl.load(starts_ptr + expert) + (tile - first_tile) * BLOCK_M
    row_end = tl.load(starts_ptr + expert) + count
    offs_m = row0 + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # the dense kernel's own K loop (one slice: all of K), rows bounded by the expert's end
    partial = _slice_sum(x_ptr, w_ptr + expert.to(tl.int64) * stride_we, offs_m, offs_n, row_end, N, K,
                         stride_xm, stride_wn, 0, K_PER_SPLIT, BLOCK_M, BLOCK_N, BLOCK_K, INPUT_PRECISION)
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32) + partial
    mask = (offs_m[:, None] < row_end) & (offs_n[None, :] < N)
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], total.to(y_ptr.dtype.element_ty), mask=mask)


def grouped(x, w, starts, counts, *, block_m: int, config=(128, 64, 4, 3), out_dtype=None):
    """x [P, K] (rows sorted by expert, K contiguous), w [E, N, K], starts/counts [E] int32 on
    the device (expert e owns rows [starts[e], starts[e] + counts[e])) -> y [P, N] in
    out_dtype (default x's). block_m may follow the batch; config = (BLOCK_N, BLOCK_K,
    num_warps, num_stages)."""
    num_rows, k_dim = x.shape
    num_experts, n_dim = w.shape[0], w.shape[1]
    if x.stride(1) != 1 or w.stride(2) != 1:
        raise ValueError("x and w need K contiguous")
    if w.dtype != x.dtype:
        raise ValueError(f"grouped linear: x is {x.dtype}, w is {w.dtype}")
    block_n, block_k, num_warps, num_stages = config
    tile_ends = torch.cumsum((counts + block_m - 1) // block_m, 0).to(torch.int32)
    y = torch.empty((num_rows, n_dim), dtype=out_dtype or x.dtype, device=x.device)
    grid = (triton.cdiv(num_rows, block_m) + num_experts, triton.cdiv(n_dim, block_n))
    _grouped_gemm_kernel[grid](x, w, y, starts, counts, tile_ends, n_dim, k_dim, x.stride(0), w.stride(0),
                               w.stride(1), NUM_EXPERTS=num_experts,
                               EXPERTS_POW2=triton.next_power_of_2(num_experts), K_PER_SPLIT=k_dim,
                               BLOCK_M=block_m,
                               BLOCK_N=block_n, BLOCK_K=block_k,
                               INPUT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
                               num_warps=num_warps, num_stages=num_stages)
    return y


@triton.jit
def _grouped_weight_grad_kernel(dy_ptr, x_ptr, dw_ptr, starts_ptr, counts_ptr, N, K, stride_dym, stride_xm,
                                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
                                INPUT_PRECISION: tl.constexpr):
    expert = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.program_id(2) * BLOCK_K + tl.arange(0, BLOCK_K)
    start = tl.load(starts_ptr + expert)
    count = tl.load(counts_ptr + expert)
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for r0 in range(0, count, BLOCK_R):  # the expert's rows in order, one accumulator
        rows = r0 + tl.arange(0, BLOCK_R)
        a = tl.load(dy_ptr + (start + rows)[None, :] * stride_dym + offs_n[:, None],
                    mask=(rows[None, :] < count) & (offs_n[:, None] < N), other=0.0)
        b = tl.load(x_ptr + (start + rows)[:, None] * stride_xm + offs_k[None, :],
                    mask=(rows[:, None] < count) & (offs_k[None, :] < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    mask = (offs_n[:, None] < N) & (offs_k[None, :] < K)
    tl.store(dw_ptr + expert.to(tl.int64) * N * K + offs_n[:, None] * K + offs_k[None, :],
             acc.to(dw_ptr.dtype.element_ty), mask=mask)


def weight_grad(dy, x, starts, counts, num_experts: int, *, config=(64, 64, 32, 4, 3)):
    """dw[e] = dy[rows of e]^T @ x[rows of e] for every expert in one launch: dy [P, N] and
    x [P, K] (rows sorted by expert, N and K contiguous) -> dw [E, N, K] in x's dtype, each
    element summed over the expert's rows in row order into one fp32 accumulator (an expert
    nobody chose gets zeros). config = (BLOCK_N, BLOCK_K, BLOCK_R, num_warps, num_stages)."""
    n_dim, k_dim = dy.shape[1], x.shape[1]
    if dy.stride(1) != 1 or x.stride(1) != 1:
        raise ValueError("dy and x need contiguous rows")
    block_n, block_k, block_r, num_warps, num_stages = config
    dw = torch.empty((num_experts, n_dim, k_dim), dtype=x.dtype, device=x.device)
    grid = (num_experts, triton.cdiv(n_dim, block_n), triton.cdiv(k_dim, block_k))
    _grouped_weight_grad_kernel[grid](dy, x, dw, starts, counts, n_dim, k_dim, dy.stride(0), x.stride(0),
                                      BLOCK_N=block_n, BLOCK_K=block_k, BLOCK_R=block_r,
                                      INPUT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
                                      num_warps=num_warps, num_stages=num_stages)
    return dw
