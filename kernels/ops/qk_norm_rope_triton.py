"""q/k RMSNorm and rotary embedding in one Triton launch on CUDA: the qk_norm + rope fusion.

Each part is the region kernel it replaces, called as a function (kernels/ops/fusions.py): a
program norms ROWS (token, head) rows of q or k with norm/triton.py's row code at its tile for the
head width, then after a block barrier rotates them with rope/triton.py's row code: the qk_norm and
rope outputs of the separate launches, bit for bit; tracers see both (RegionDispatch.fused).
Given the paged pools, the launch also writes the step's K/V: k's programs copy their rotated rows
to the key slots after a second barrier, added programs copy v's rows (kv_write_triton.py's row
copy), so attention's K/V write (a copy: no bit moves) is one kernel fewer per layer.
"""
import math

import torch
import triton
import triton.language as tl

from kernels.ops.kv_write_triton import _copy_rows
from kernels.ops.norm.triton import _norm_rows, tile
from kernels.ops.pdl import launch_options, wait_for_inputs
from kernels.ops.rope.triton import _rotate_rows, _unit_last


@triton.jit
def _norm_then_rotate(x_ptr, w_ptr, normed_ptr, out_ptr, pos_ptr, cos_ptr, sin_ptr, block, num_rows, heads,
                      stride_xt, stride_xh, eps, log2_theta, HALF: tl.constexpr, NORM_BLOCK: tl.constexpr,
                      ROPE_BLOCK: tl.constexpr, ROWS: tl.constexpr, FROM_TABLE: tl.constexpr):
    _norm_rows(x_ptr, x_ptr, w_ptr, normed_ptr, normed_ptr, block, num_rows, heads, stride_xt, stride_xh, 0, 0,
               2 * HALF, eps, False, True, NORM_BLOCK, ROWS)
    tl.debug_barrier()  # the program's normed rows, stored by all its threads, are read back below
    _rotate_rows(normed_ptr, out_ptr, pos_ptr, cos_ptr, sin_ptr, block, num_rows, heads, heads * 2 * HALF, 2 * HALF,
                 log2_theta, HALF, ROPE_BLOCK, ROWS, FROM_TABLE)


@triton.jit
def _qk_norm_rope_kernel(q_ptr, k_ptr, v_ptr, qw_ptr, kw_ptr, qn_ptr, kn_ptr, q_out_ptr, k_out_ptr, pos_ptr,
                         cos_ptr, sin_ptr, k_pool_ptr, v_pool_ptr, slots_ptr, q_rows, k_rows, q_heads, k_heads,
                         stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, eps, log2_theta,
                         HALF: tl.constexpr, NORM_BLOCK: tl.constexpr, ROPE_BLOCK: tl.constexpr,
                         ROWS: tl.constexpr, FROM_TABLE: tl.constexpr, WRITE_KV: tl.constexpr,
                         PDL: tl.constexpr):
    wait_for_inputs(PDL)
    program = tl.program_id(0)
    q_programs, k_programs = tl.cdiv(q_rows, ROWS), tl.cdiv(k_rows, ROWS)
    if program < q_programs:
        _norm_then_rotate(q_ptr, qw_ptr, qn_ptr, q_out_ptr, pos_ptr, cos_ptr, sin_ptr, program, q_rows, q_heads,
                          stride_qt, stride_qh, eps, log2_theta, HALF, NORM_BLOCK, ROPE_BLOCK, ROWS, FROM_TABLE)
    elif program < q_programs + k_programs:
        block = program - q_programs
        _norm_then_rotate(k_ptr, kw_ptr, kn_ptr, k_out_ptr, pos_ptr, cos_ptr, sin_ptr, block, k_rows, k_heads,
                          stride_kt, stride_kh, eps, log2_theta, HALF, NORM_BLOCK, ROPE_BLOCK, ROWS, FROM_TABLE)
        if WRITE_KV:
            tl.debug_barrier()  # the program's rotated rows, stored by all its threads, are copied below
            _copy_rows(k_out_ptr, k_pool_ptr, slots_ptr, block, k_rows, k_heads, k_heads * 2 * HALF, 2 * HALF,
                       2 * HALF, ROPE_BLOCK * 2, ROWS)
    else:
        _copy_rows(v_ptr, v_pool_ptr, slots_ptr, program - q_programs - k_programs, k_rows, k_heads, stride_vt,
                   stride_vh, 2 * HALF, ROPE_BLOCK * 2, ROWS)


def _check_kv_write(kv_write, k):
    """kv_write = (v, key pool, value pool, slots): v like k, pools [S, Hk, D] contiguous in k's
    dtype, slots [T] long; a ValueError names what does not fit."""
    v, key_pool, value_pool, slots = kv_write
    fits = (v.shape == k.shape and v.dtype == k.dtype and v.stride(2) == 1
            and all(p.is_contiguous() and p.dtype == k.dtype and p.shape[1:] == k.shape[1:]
                    for p in (key_pool, value_pool))
            and slots.shape == (k.shape[0],) and slots.dtype == torch.long)
    if not fits:
        raise ValueError(f"qk_norm_rope kv_write: v {tuple(v.shape)} {v.dtype} strides {v.stride()}, pools "
                         f"{tuple(key_pool.shape)} {key_pool.dtype}, {tuple(value_pool.shape)} {value_pool.dtype}, "
                         f"slots {tuple(slots.shape)} {slots.dtype}, k {tuple(k.shape)} {k.dtype}")


def launch(q, k, q_weight, k_weight, positions, *, eps: float, cos_table=None, sin_table=None, theta: float = 0.0,
           kv_write=None):
    """q [T, Hq, D], k [T, Hk, D] (any strides with a unit last one), their norm weights [D]
    and positions [T] -> (normed q, normed k, rotated q, rotated k), all contiguous: from the
    fp32 tables when given (consistent), else from theta (fast). kv_write = (v [T, Hk, D] with
    a unit last stride, key pool, value pool, slots [T]): also key_pool[slots] = rotated k and
    value_pool[slots] = v, as the K/V write would."""
    q, k = _unit_last(q), _unit_last(k)
    num_tokens, q_heads, head_dim = q.shape
    if (head_dim % 2 or positions.shape != (num_tokens,) or k.shape[0] != num_tokens or k.shape[2] != head_dim
            or q_weight.shape != (head_dim,) or k_weight.shape != (head_dim,)):
        raise ValueError(f"qk_norm_rope: q {tuple(q.shape)}, k {tuple(k.shape)}, weights {tuple(q_weight.shape)}, "
                         f"{tuple(k_weight.shape)}, positions {tuple(positions.shape)}")
    normed = [torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in (q, k)]
    rotated = [torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in (q, k)]
    norm_block, rows = tile(head_dim)
    q_rows, k_rows = num_tokens * q_heads, num_tokens * k.shape[1]
    from_table = cos_table is not None
    if kv_write is not None:
        _check_kv_write(kv_write, k)
    v, key_pool, value_pool, slots = kv_write if kv_write is not None else (k, k, k, positions)
    programs = (triton.cdiv(q_rows, rows) + triton.cdiv(k_rows, rows) * (1 if kv_write is None else 2))
    if programs:
        _qk_norm_rope_kernel[(programs,)](
            q, k, v, q_weight, k_weight, *normed, *rotated, positions, cos_table if from_table else q,
            sin_table if from_table else q, key_pool, value_pool, slots, q_rows, k_rows, q_heads,
            max(1, k.shape[1]), q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), eps,
            math.log2(theta) if theta > 0 else 0.0, HALF=head_dim // 2, NORM_BLOCK=norm_block,
            ROPE_BLOCK=triton.next_power_of_2(head_dim // 2), ROWS=rows, FROM_TABLE=from_table,
            WRITE_KV=kv_write is not None, num_warps=4, **launch_options(q.device))
    return (*normed, *rotated)
