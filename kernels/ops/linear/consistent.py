"""linear.consistent: the padded rows cut into tiles of `row_multiple` rows, one GEMM of that
shape per tile, so each row is reduced by the same call whatever the batch; on CUDA the Triton
GEMM (cuda.py). A row's place inside its tile must not matter either: for 2-3 output columns the
CPU BLAS takes a path where it does, so narrow weights get zero rows up to MIN_COLUMNS (their
outputs cut off). The row tiles also serve attention's GEMMs and the trainer's head.
"""
import torch
import torch.nn.functional as F

from kernels.ops.linear.forms import _blas
from kernels.ops.padding import pad_to_multiple

MIN_COLUMNS = 8


def require_cpu(x, what: str) -> None:
    """The consistent CPU arithmetic is proven on CPU only; CUDA gets Triton kernels."""
    if x.device.type != "cpu":
        raise NotImplementedError(f"{what}: the consistent path for {x.device.type} is not built "
                                  f"yet (Triton kernels); cuBLAS/SDPA are batch-variant there")


def in_row_tiles(gemm, a, *, dim: int, tile_rows: int, dtype=None):
    """gemm over `a` cut along `dim` into zero-padded tiles of tile_rows rows: every call has
    one shape, so the BLAS reduces each row the same way for any number of rows. With `dtype`,
    `a` is converted by the same copy that pads it (a small MoE group's GEMM costs no more)."""
    num_rows = a.shape[dim]
    if dtype is None:
        padded = pad_to_multiple(a, dim, tile_rows)
    else:
        shape = list(a.shape)
        shape[dim] = -(-num_rows // tile_rows) * tile_rows
        padded = a.new_zeros(shape, dtype=dtype)
        padded.narrow(dim, 0, num_rows).copy_(a)
    tiles = padded.split(tile_rows, dim)
    if len(tiles) == 1:
        return gemm(tiles[0]).narrow(dim, 0, num_rows)
    return torch.cat([gemm(tile) for tile in tiles], dim).narrow(dim, 0, num_rows)


def row_invariant_matmul(a, b, *, row_multiple: int):
    """a[..., M, K] @ b[..., K, N] in tiles of row_multiple rows, so that each row's K
    reduction is the same for any M. Used by attention's score and value GEMMs."""
    require_cpu(a, "row_invariant_matmul")
    return in_row_tiles(lambda tile: torch.matmul(tile, b), a, dim=-2, tile_rows=row_multiple)


def consistent(x, w, *, row_multiple: int, out_dtype=None):
    """Batch invariant: each row's bits are independent of M and of its position. With
    out_dtype=torch.float32 the fp32 sums come back unrounded (a layout's K-leaf partials)."""
    if x.device.type == "cuda":
        import kernels.ops.linear.cuda as linear_cuda  # imports Triton: CUDA machines only
        return linear_cuda.consistent(x, w, out_dtype)
    require_cpu(x, "linear.consistent")
    columns = w.shape[0]
    if columns < MIN_COLUMNS:
        w = torch.cat([w, w.new_zeros(MIN_COLUMNS - columns, w.shape[1])])
    if x.dtype in (torch.bfloat16, torch.float16):  # _blas's fp32 route, each operand converted once
        w32 = w.float()
        out = in_row_tiles(lambda tile: F.linear(tile, w32), x, dim=0, tile_rows=row_multiple, dtype=torch.float32)
        out = out if out_dtype == torch.float32 else out.to(out_dtype or x.dtype)
    else:
        out = in_row_tiles(lambda tile: _blas(tile, w, out_dtype), x.contiguous(), dim=0, tile_rows=row_multiple)
    return out if columns >= MIN_COLUMNS else out[:, :columns]
