"""Quantization: FP8 E4M3 and NVFP4 round trips, W4A16 and W8A8 GEMMs, a straight-through estimator.

FP8 E4M3 (max 448, no inf): an fp32 scale per group (tensor, row, 1x128 or 128x128 block), amax/448
or 1.0 where that is 0, amax ignoring non-finite values; x^ = RNE(clamp(x / scale, -448, 448)) *
scale. NVFP4: E2M1 elements, an E4M3 scale per 16, an fp32 one per tensor. Consistency: every step
is an IEEE-rounded elementwise fp32 op or a max; divisions are true, never reciprocal multiplies;
casts are clamped first (torch versions, ml_dtypes and Triton disagree on overflow). Row-only scales
and linear.consistent's row tiles keep W8A8 batch invariant. A KV store's FP8 (kv_encode, kv_decode)
is a saturating E4M3 cast with a static scale of 1. Reference: gates/reference/quant.py.
"""
from dataclasses import dataclass
from functools import partial

import torch

from kernels.ops.linear.consistent import consistent as linear_consistent
from kernels.ops.linear.consistent import require_cpu
from kernels.ops.linear.fast import fast as linear_fast
from kernels.ops.padding import pad_to_multiple

E4M3_MAX = 448.0
E4M3_MIN_SUBNORMAL = 2.0 ** -9
E2M1_MAX = 6.0
NVFP4_BLOCK = 16
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # index = magnitude code (bits 0-2)
E2M1_SIGN = 0x8
# Midpoints between neighbouring E2M1 values and whether a tie rounds up: ties go to the even
# code (mantissa bit 0), so 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4.
_E2M1_TIES = ((0.25, False), (0.75, True), (1.25, False), (1.75, True),
              (2.5, False), (3.5, True), (5.0, False))
# granularity -> (rows, cols) of one scale group; None cols = the whole row.
FP8_GROUPS = {"tensor": None, "token": (1, None), "block_1x128": (1, 128), "block_128x128": (128, 128)}


def _fp32(value: float, like: torch.Tensor) -> torch.Tensor:
    """A 0-d fp32 tensor on like's device (a fill, so graph capture allows it): CUDA divides by a
    CPU scalar as a multiply by its fp32 reciprocal, which is not the true quotient."""
    return torch.full((), value, dtype=torch.float32, device=like.device)


def saturating_e4m3(x32: torch.Tensor) -> torch.Tensor:
    """fp32 -> float8_e4m3fn, round to nearest even, clamped first (inf -> +-448, NaN stays)."""
    return x32.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def _group_shape(x: torch.Tensor, granularity: str):
    """(rows, cols) of one scale group of x's last-2D view, or None for one per tensor."""
    if granularity not in FP8_GROUPS:
        raise ValueError(f"granularity must be one of {sorted(FP8_GROUPS)}, got {granularity!r}")
    if FP8_GROUPS[granularity] is None:
        return None
    if x.dim() < 2:
        raise ValueError(f"granularity {granularity!r} needs at least 2 dims, got shape {tuple(x.shape)}")
    rows, cols = FP8_GROUPS[granularity]
    return rows, cols or x.shape[-1]


def _finite_magnitude(x32):
    return torch.where(torch.isfinite(x32), x32.abs(), torch.zeros_like(x32))


def _group_amax(x32, rows, cols):
    """[..., ceil(M/rows), ceil(K/cols)]: max |x| per group; zero padding cannot raise a max."""
    magnitude = pad_to_multiple(pad_to_multiple(_finite_magnitude(x32), -2, rows), -1, cols)
    *lead, num_rows, num_cols = magnitude.shape
    return magnitude.reshape(*lead, num_rows // rows, rows, num_cols // cols, cols).amax(dim=(-3, -1))


def _expand(scale, rows, cols, shape):
    """Per-group scales broadcast back onto the [..., M, K] shape they cover."""
    full = scale.repeat_interleave(rows, dim=-2).repeat_interleave(cols, dim=-1)
    return full[..., :shape[-2], :shape[-1]]


def fp8_quantize(x: torch.Tensor, granularity: str):
    """(q float8_e4m3fn shaped like x, fp32 scale: [] per tensor, else [..., groups_M, groups_K])."""
    x32 = x.float()
    group = _group_shape(x, granularity)
    amax = _finite_magnitude(x32).amax() if group is None else _group_amax(x32, *group)
    scale = amax / _fp32(E4M3_MAX, amax)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    full = scale if group is None else _expand(scale, *group, x.shape)
    return saturating_e4m3(x32 / full), scale


def fp8_dequantize(q: torch.Tensor, scale: torch.Tensor, granularity: str, dtype: torch.dtype):
    """q * scale in fp32 (one IEEE multiply), then one rounding to dtype."""
    group = _group_shape(q, granularity)
    full = scale if group is None else _expand(scale, *group, q.shape)
    return (q.float() * full).to(dtype)


@dataclass(frozen=True, slots=True)
class NVFP4Tensor:
    """An NVFP4-quantized tensor, one E2M1 code per byte (unpacked)."""
    codes: torch.Tensor
    """uint8 [..., K]: bit 3 the sign, bits 0-2 the index into E2M1_VALUES."""
    block_scales: torch.Tensor
    """float8_e4m3fn [..., K // 16]: one scale per 16 consecutive elements of the last dim."""
    global_scale: torch.Tensor
    """fp32 []: 448 * 6 / amax(tensor)."""
    shape: tuple
    """The original shape."""


def e2m1_encode(v32: torch.Tensor) -> torch.Tensor:
    """uint8 E2M1 codes of fp32 values: round to nearest even by thresholds, |v| > 6 -> 6,
    the sign kept (-0.0 -> 0x8)."""
    magnitude = v32.abs().clamp(max=E2M1_MAX)
    code = torch.zeros(v32.shape, dtype=torch.uint8, device=v32.device)
    for midpoint, tie_rounds_up in _E2M1_TIES:
        code += (magnitude >= midpoint) if tie_rounds_up else (magnitude > midpoint)
    return code + torch.signbit(v32).to(torch.uint8) * E2M1_SIGN


def _e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    table = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), dtype=torch.float32, device=codes.device)
    return table[codes.long()]  # the sign bit (8) indexes the negated half; -0.0 included


def _nvfp4_decode_scale(block_scales, global_scale):
    """[..., K // 16, 1] fp32: block_scale / global_scale, the step between codes."""
    return (block_scales.float() / global_scale).unsqueeze(-1)


def nvfp4_quantize(x: torch.Tensor) -> NVFP4Tensor:
    """global_scale = 448*6 / amax(x) (fp32; 1.0 if that is not finite, e.g. an all-zero x);
    block_scale = e4m3(clamp(amax(block) / 6 * global_scale, 2^-9, 448)) -- the floor keeps
    an all-zero block's step non-zero (the usual recipe lets it reach 0 and special-cases it);
    code = RNE onto E2M1 of clamp(x / (block_scale / global_scale), -6, 6)."""
    if x.dim() < 1 or x.shape[-1] % NVFP4_BLOCK:
        raise ValueError(f"NVFP4 needs the last dim a multiple of {NVFP4_BLOCK}, got shape {tuple(x.shape)}")
    x32 = x.float()
    if not bool(torch.isfinite(x32).all()):
        raise ValueError("NVFP4 quantizes finite values only (E2M1 has no inf or NaN)")
    global_scale = _fp32(E4M3_MAX * E2M1_MAX, x32) / x32.abs().amax()
    global_scale = torch.where(torch.isfinite(global_scale), global_scale, _fp32(1.0, x32))
    blocks = x32.reshape(*x.shape[:-1], x.shape[-1] // NVFP4_BLOCK, NVFP4_BLOCK)
    wanted = blocks.abs().amax(dim=-1) / _fp32(E2M1_MAX, x32) * global_scale
    block_scales = saturating_e4m3(wanted.clamp(min=E4M3_MIN_SUBNORMAL))
    codes = e2m1_encode(blocks / _nvfp4_decode_scale(block_scales, global_scale))
    return NVFP4Tensor(codes.reshape(x.shape), block_scales, global_scale, tuple(x.shape))


def nvfp4_dequantize(t: NVFP4Tensor, dtype: torch.dtype) -> torch.Tensor:
    """E2M1 value * (block_scale / global_scale) in fp32, then one rounding to dtype."""
    values = _e2m1_decode(t.codes).reshape(*t.shape[:-1], t.shape[-1] // NVFP4_BLOCK, NVFP4_BLOCK)
    return (values * _nvfp4_decode_scale(t.block_scales, t.global_scale)).reshape(t.shape).to(dtype)


def w4a16_fast(x, w: NVFP4Tensor):
    """Weights dequantized to the activation dtype, then the plain BLAS call (follows M)."""
    return linear_fast(x, nvfp4_dequantize(w, x.dtype))


def _w8a8(x, w_q, w_scale, activation_granularity, gemm):
    """Activations quantized at the given granularity, both operands dequantized to fp32,
    an fp32 GEMM, one rounding to x's dtype. Weights: FP8 with 128x128 block scales."""
    x_q, x_scale = fp8_quantize(x, activation_granularity)
    x_hat = fp8_dequantize(x_q, x_scale, activation_granularity, torch.float32)
    w_hat = fp8_dequantize(w_q, w_scale, "block_128x128", torch.float32)
    return gemm(x_hat, w_hat).to(x.dtype)


def w8a8_fast(x, w_q, w_scale):
    """Per-tensor activation scale: one amax over the whole batch, so a row's bits follow
    whatever else is in the batch (a realistic, batch-variant choice)."""
    return _w8a8(x, w_q, w_scale, "tensor", linear_fast)


def w4a16_consistent(x, w: NVFP4Tensor, *, row_multiple: int):
    """Batch invariant: dequantization is elementwise and per weight tensor; row-tiled GEMM."""
    return linear_consistent(x, nvfp4_dequantize(w, x.dtype), row_multiple=row_multiple)


def w8a8_consistent(x, w_q, w_scale, *, row_multiple: int):
    """Batch invariant: activation scales per row and 128 columns (1x128), padded fp32 GEMM."""
    require_cpu(x, "quant.w8a8_consistent")
    return _w8a8(x, w_q, w_scale, "block_1x128", partial(linear_consistent, row_multiple=row_multiple))


class StraightThroughQuant(torch.autograd.Function):
    """Forward: quantize_dequantize(w); backward: the gradient reaches the master weight unchanged."""

    @staticmethod
    def forward(ctx, w, quantize_dequantize):
        result = quantize_dequantize(w)
        if result.dtype != w.dtype or result.shape != w.shape:
            raise ValueError(f"quantize_dequantize must keep shape and dtype: {tuple(w.shape)}/{w.dtype} "
                             f"-> {tuple(result.shape)}/{result.dtype}")
        return result

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def ste(w: torch.Tensor, quantize_dequantize) -> torch.Tensor:
    """w's quantized-dequantized value, with the identity as its gradient (STE)."""
    return StraightThroughQuant.apply(w, quantize_dequantize)


def nvfp4_round_trip(w: torch.Tensor) -> torch.Tensor:
    """nvfp4_dequantize(nvfp4_quantize(w)) in w's dtype (for ste)."""
    return nvfp4_dequantize(nvfp4_quantize(w), w.dtype)


def fp8_round_trip(w: torch.Tensor, granularity: str = "block_128x128") -> torch.Tensor:
    """fp8_dequantize(fp8_quantize(w)) in w's dtype (for ste)."""
    return fp8_dequantize(*fp8_quantize(w, granularity), granularity, w.dtype)


KV_FORMATS = ("auto", "fp8")


def kv_encode(x, kv_format: str):
    """What a KV store keeps: the activation itself, or FP8 E4M3 with a static scale of 1
    (as engines run an uncalibrated FP8 KV cache), clamped before the cast."""
    return saturating_e4m3(x.float()) if kv_format == "fp8" else x


def kv_decode(stored, dtype):
    """What attention reads back from a store: the one read path of every case."""
    return stored.to(torch.float32).to(dtype) if stored.dtype == torch.float8_e4m3fn else stored


def kv_round_trip(x, kv_format: str):
    """decode(encode(x)) with the gradient straight through (the trainer's transient store)."""
    if kv_format == "auto":
        return x
    return ste(x, lambda t: kv_decode(kv_encode(t, kv_format), t.dtype))
