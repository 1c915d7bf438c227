"""The paged KV write on CUDA: K and V rows scattered into their pools' slots in one Triton launch.

A copy moves no bit, so both contracts and every case share it. A program copies ROWS rows of K or
of V (programs past K's take V's); rows are [Hkv * D] wide, heads contiguous, any row stride. FP8
pools keep the torch path (the encode is a cast). Imports Triton, so only CUDA machines (or
TRITON_INTERPRET=1 tests) import this file.
"""
import triton
import triton.language as tl

from kernels.ops.pdl import launch_options, wait_for_inputs

TILE_ELEMENTS = 4096  # a program copies max(1, TILE_ELEMENTS // row width) rows


@triton.jit
def _copy_rows(src_ptr, pool_ptr, slots_ptr, block, num_rows, heads, stride_t, stride_h, width,
               BLOCK: tl.constexpr, ROWS: tl.constexpr):
    """(token, head) rows block * ROWS .. + ROWS of src (each `width` wide) copied to
    pool[slots[token], head] of a contiguous [S, heads, width] pool. The write below copies
    whole token rows (heads = 1); the fused q/k norm + RoPE copies the (token, head) rows it
    rotated."""
    rows = block * ROWS + tl.arange(0, ROWS).to(tl.int64)
    is_row = rows < num_rows
    token, head = rows // heads, rows % heads
    slot = tl.load(slots_ptr + token, mask=is_row, other=0)
    offs = tl.arange(0, BLOCK)[None, :]
    mask = is_row[:, None] & (offs < width)
    values = tl.load(src_ptr + (token * stride_t + head * stride_h)[:, None] + offs, mask=mask)
    tl.store(pool_ptr + ((slot * heads + head) * width)[:, None] + offs, values, mask=mask)


@triton.jit
def _kv_write_kernel(k_ptr, v_ptr, k_pool_ptr, v_pool_ptr, slots_ptr, num_rows, stride_k, stride_v, width,
                     BLOCK: tl.constexpr, ROWS: tl.constexpr, PDL: tl.constexpr):
    wait_for_inputs(PDL)
    program = tl.program_id(0)
    k_programs = tl.cdiv(num_rows, ROWS)
    if program < k_programs:
        _copy_rows(k_ptr, k_pool_ptr, slots_ptr, program, num_rows, 1, stride_k, 0, width, BLOCK, ROWS)
    else:
        _copy_rows(v_ptr, v_pool_ptr, slots_ptr, program - k_programs, num_rows, 1, stride_v, 0, width, BLOCK, ROWS)


def _flat_rows(t):
    """t [M, Hkv, D] as rows of Hkv * D contiguous elements, or None when its heads are not."""
    if t.dim() != 3 or t.stride(2) != 1 or t.stride(1) != t.shape[2]:
        return None
    return t


def scatter(key_pool, value_pool, slots, k, v) -> bool:
    """key_pool[slots] = k; value_pool[slots] = v in one launch (pools [S, Hkv, D] with
    contiguous slots, k and v [M, Hkv, D] of the pools' dtype); False, with nothing written,
    when the layout is not one this kernel takes (the caller scatters in torch)."""
    k, v = _flat_rows(k), _flat_rows(v)
    if (k is None or v is None or k.dtype != key_pool.dtype or v.dtype != value_pool.dtype
            or not key_pool.is_contiguous() or not value_pool.is_contiguous() or k.shape != v.shape
            or k.shape[1:] != key_pool.shape[1:] or slots.shape != (k.shape[0],)):
        return False
    num_rows, width = k.shape[0], k.shape[1] * k.shape[2]
    block = triton.next_power_of_2(width)
    rows_per_program = max(1, TILE_ELEMENTS // block)
    if num_rows:
        _kv_write_kernel[(2 * triton.cdiv(num_rows, rows_per_program),)](
            k, v, key_pool, value_pool, slots, num_rows, k.stride(0), v.stride(0), width, BLOCK=block,
            ROWS=rows_per_program, num_warps=4, **launch_options(k.device))
    return True
