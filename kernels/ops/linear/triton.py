"""y = x @ w^T on CUDA through Triton (bf16/fp16/fp32 in, fp32 accumulation): the consistent GEMM.

Each element's K reduction is one fixed sequence at every M: `num_splits` slices (a count fixed by
(N, K); bounds at multiples of SLICE_ALIGN), each summed from zero in BLOCK_K steps in fp32, added
left to right, rounded once. What may follow M moves only which program computes an element: the
tile, BLOCK_K within the slice bounds, slices looped or parallel (same ordered combine), the load
path (pointer, tma, persistent). That the MMA keeps the order inside a BLOCK_K step is empirical:
benchmarks/gpu_gemm.py checks every variant at every M. Reference: gates/reference/linear.py.
"""
import functools

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels.ops.gemm_tuning import KERNELS
from kernels.ops.pdl import launch_options, wait_for_inputs

SLICE_ALIGN = 128  # K slices start at multiples of this; every BLOCK_K used must divide it


@triton.jit
def _slice_sum(x_ptr, w_ptr, offs_m, offs_n, M, N, K, stride_xm, stride_wn, split,
               K_PER_SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """One K slice of one tile, summed from zero in BLOCK_K steps: [BLOCK_M, BLOCK_N] fp32."""
    offs_k = tl.arange(0, BLOCK_K)
    partial = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(split * K_PER_SPLIT, min((split + 1) * K_PER_SPLIT, K), BLOCK_K):
        k = k0 + offs_k
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :],
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(w_ptr + offs_n[None, :] * stride_wn + k[:, None],
                    mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        partial = tl.dot(a, b, partial, input_precision=INPUT_PRECISION)
    return partial


@triton.jit
def _grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Grouped launch order: neighbouring tiles share w tiles in L2."""
    group = GROUP_M * num_pid_n
    first_m = (tile // group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % group) % group_m, (tile % group) // group_m


@triton.jit(do_not_specialize=["M"])
def _gemm_kernel(x_ptr, w_ptr, y_ptr, M, N, K, stride_xm, stride_wn,
                 K_PER_SPLIT: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                 INPUT_PRECISION: tl.constexpr, PDL: tl.constexpr):
    wait_for_inputs(PDL)
    pid_m, pid_n = _grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for split in range(NUM_SPLITS):  # slices combined left to right, in fp32
        total = total + _slice_sum(x_ptr, w_ptr, offs_m, offs_n, M, N, K, stride_xm, stride_wn, split,
                                   K_PER_SPLIT, BLOCK_M, BLOCK_N, BLOCK_K, INPUT_PRECISION)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], total.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["M", "num_programs"])
def _gemm_tma_kernel(x_desc, w_desc, y_desc, M, N, K, num_programs, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, OUT_DTYPE: tl.constexpr,
                     FLATTEN: tl.constexpr, INPUT_PRECISION: tl.constexpr, PDL: tl.constexpr):
    """One slice (all of K) per tile, tiles loaded by the tensor memory accelerator; program p
    computes tiles p, p + num_programs, ... (one tile each when the grid covers them all)."""
    wait_for_inputs(PDL)
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, num_programs, flatten=FLATTEN):
        pid_m, pid_n = _grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)
        total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = x_desc.load([pid_m * BLOCK_M, k0])
            b = w_desc.load([pid_n * BLOCK_N, k0])
            total = tl.dot(a, b.T, total, input_precision=INPUT_PRECISION)
        y_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], total.to(OUT_DTYPE))


@triton.jit(do_not_specialize=["M"])
def _slice_kernel(x_ptr, w_ptr, partial_ptr, M, N, K, stride_xm, stride_wn,
                  K_PER_SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """One K slice of one tile per program (axis 1 = the slice): the same partial sum the
    in-program loop above computes for that slice, written in fp32 for the ordered combine."""
    pid_m, pid_n = tl.program_id(0) // tl.cdiv(N, BLOCK_N), tl.program_id(0) % tl.cdiv(N, BLOCK_N)
    split = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    partial = _slice_sum(x_ptr, w_ptr, offs_m, offs_n, M, N, K, stride_xm, stride_wn, split,
                         K_PER_SPLIT, BLOCK_M, BLOCK_N, BLOCK_K, INPUT_PRECISION)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(partial_ptr + split * M * N + offs_m[:, None] * N + offs_n[None, :], partial, mask=mask)


@triton.jit
def _combine_kernel(partial_ptr, y_ptr, size, NUM_SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    """y = (((0 + p0) + p1) + ...) rounded once: the looped kernel's order, in one launch."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < size
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for split in range(NUM_SPLITS):
        total = total + tl.load(partial_ptr + split * size + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, total.to(y_ptr.dtype.element_ty), mask=mask)


def _input_precision(dtype) -> str:
    """fp32 operands are multiplied in full fp32 ("ieee"), never rounded to TF32 first; for
    half-precision operands the setting has no effect."""
    return "ieee" if dtype == torch.float32 else "tf32"


_TL_DTYPES = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def tma_ready(x, w, out_dtype=None) -> bool:
    """The tensor memory accelerator needs 16-byte aligned bases and row strides (y's rows are
    N elements of out_dtype, default x's)."""
    row_bytes = w.shape[0] * (out_dtype or x.dtype).itemsize
    return row_bytes % 16 == 0 and all(t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0
                                       for t in (x, w))


def _gemm_tma(x, w, y, config, block_k, persistent, precision):
    block_m, block_n, num_warps, num_stages = config
    (M, K), N = x.shape, w.shape[0]
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    programs = min(tiles, _sm_count(x.device)) if persistent else tiles
    _gemm_tma_kernel[(programs,)](
        TensorDescriptor.from_tensor(x, [block_m, block_k]), TensorDescriptor.from_tensor(w, [block_n, block_k]),
        TensorDescriptor.from_tensor(y, [block_m, block_n]), M, N, K, programs, BLOCK_M=block_m,
        BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8, OUT_DTYPE=_TL_DTYPES[y.dtype], FLATTEN=persistent,
        INPUT_PRECISION=precision, num_warps=num_warps, num_stages=num_stages, **launch_options(x.device))
    return y


@functools.lru_cache(maxsize=None)
def _sm_count(device) -> int:
    """The persistent grid's size. Under the CPU interpreter three programs stand in for the
    SMs, so a test still sees programs that walk several tiles."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 3


def consistent(x, w, *, config, num_splits: int = 1, block_k: int = 64, parallel_splits: bool = False,
               kernel: str = "pointer", out_dtype=None):
    """x [M, K], w [N, K] (K contiguous in both, any row stride), both bf16/fp16/fp32 -> y
    [M, N] in out_dtype (default x's; fp32 stores the accumulator unrounded). `config` =
    (BLOCK_M, BLOCK_N, num_warps, num_stages), block_k (with several slices, a divisor of
    SLICE_ALIGN), `kernel` (one of KERNELS: the TMA ones take one slice and aligned operands)
    and `parallel_splits` may follow M; num_splits may not."""
    M, K = x.shape
    N = w.shape[0]
    if x.stride(1) != 1 or w.stride(1) != 1:
        raise ValueError("x and w need contiguous rows (stride 1 along K)")
    if kernel not in KERNELS:
        raise ValueError(f"kernel {kernel!r}: expected one of {KERNELS}")
    y = torch.empty((M, N), dtype=out_dtype or x.dtype, device=x.device)
    precision = _input_precision(x.dtype)
    block_m, block_n, num_warps, num_stages = config
    if num_splits > 1 and SLICE_ALIGN % block_k:
        raise ValueError(f"block_k {block_k} must divide {SLICE_ALIGN} when K is cut into slices")
    if kernel != "pointer":
        if num_splits != 1 or parallel_splits or not tma_ready(x, w, y.dtype):
            raise ValueError(f"kernel {kernel!r} takes one K slice and 16-byte aligned operands")
        return _gemm_tma(x, w, y, config, block_k, kernel == "persistent", precision)
    # slice bounds from (K, num_splits) alone: rounding them to block_k would move them with
    # block_k and change the bits (seen on the H200 for K = 2688, 4 slices)
    k_per_split = triton.cdiv(triton.cdiv(K, num_splits), SLICE_ALIGN) * SLICE_ALIGN
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    if parallel_splits:  # small M: the slices run in parallel programs, then the same ordered combine
        # (starting from +0.0 as the looped kernel does, so even the sign of a zero agrees)
        partials = torch.empty((num_splits, M, N), dtype=torch.float32, device=x.device)
        _slice_kernel[grid + (num_splits,)](x, w, partials, M, N, K, x.stride(0), w.stride(0),
                                            K_PER_SPLIT=k_per_split, BLOCK_M=block_m, BLOCK_N=block_n,
                                            BLOCK_K=block_k, INPUT_PRECISION=precision,
                                            num_warps=num_warps, num_stages=num_stages)
        _combine_kernel[(triton.cdiv(M * N, 1024),)](partials, y, M * N, NUM_SPLITS=num_splits, BLOCK=1024)
        return y
    _gemm_kernel[grid](x, w, y, M, N, K, x.stride(0), w.stride(0), K_PER_SPLIT=k_per_split,
                       NUM_SPLITS=num_splits, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                       GROUP_M=8, INPUT_PRECISION=precision, num_warps=num_warps, num_stages=num_stages,
                       **launch_options(x.device))
    return y
