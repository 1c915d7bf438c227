"""Float64 reference of FP8 E4M3 and NVFP4 quantization, built without torch's float8 dtype.
The grids are enumerated from the bit layouts (E4M3: codes 0x00-0x7e incl. subnormals; E2M1:
codes 0-7) and values rounded onto them by search: the nearest grid value, a tie to the even code,
|x| beyond the grid saturating to its largest value, the sign always kept (-0.0 and tiny negatives
give the negative-zero code). The contract's fp32 intermediates (scales, quotients) are computed
in float64 and rounded to fp32 once: exact for products of fp32 values, innocuous double rounding
for quotients (53 >= 2 * 24 + 2 bits). The dequantized values are exact in float64; `to_output`
applies the contract's roundings (fp32, then dtype).
"""
from dataclasses import dataclass

import torch

E4M3_MAX = 448.0
E2M1_MAX = 6.0
E4M3_SIGN, E2M1_SIGN = 0x80, 0x8
FP8_GROUPS = {"tensor": None, "token": (1, None), "block_1x128": (1, 128), "block_128x128": (128, 128)}


def e4m3_grid() -> torch.Tensor:
    """float64 [127]: the value of each non-negative finite E4M3 code 0x00..0x7e, ascending."""
    values = []
    for code in range(0x7f):
        exponent, mantissa = code >> 3, code & 0x7
        if exponent == 0:
            values.append(mantissa / 8 * 2.0 ** -6)  # subnormal: 0.m * 2^(1 - bias)
        else:
            values.append((1 + mantissa / 8) * 2.0 ** (exponent - 7))
    return torch.tensor(values, dtype=torch.float64)


def e2m1_grid() -> torch.Tensor:
    """float64 [8]: the value of each non-negative E2M1 code 0..7 (bias 1, one mantissa bit)."""
    values = []
    for code in range(8):
        exponent, mantissa = code >> 1, code & 0x1
        values.append(mantissa / 2 if exponent == 0 else (1 + mantissa / 2) * 2.0 ** (exponent - 1))
    return torch.tensor(values, dtype=torch.float64)


def round_to_grid(x: torch.Tensor, grid: torch.Tensor, sign_bit: int):
    """(codes int64, values float64) of x rounded to nearest, ties to the even code, by a search
    of the ascending non-negative grid; |x| above the grid (inf included) saturates. No NaN."""
    x = x.double()
    magnitude = torch.minimum(x.abs(), grid[-1])
    lower = torch.searchsorted(grid, magnitude, right=True) - 1  # grid[lower] <= |x|
    upper = (lower + 1).clamp(max=len(grid) - 1)
    midpoint = (grid[lower] + grid[upper]) / 2  # exact: grid values have few significant bits
    round_up = (magnitude > midpoint) | ((magnitude == midpoint) & (lower % 2 == 1))
    code = torch.where(round_up, upper, lower)
    negative = torch.signbit(x)
    return code + negative.long() * sign_bit, torch.where(negative, -grid[code], grid[code])


def is_midpoint(x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Whether |x| lies exactly halfway between two neighbouring grid values."""
    midpoints = (grid[:-1] + grid[1:]) / 2
    return (x.double().abs().unsqueeze(-1) == midpoints).any(dim=-1)


def fp32(x64: torch.Tensor) -> torch.Tensor:
    """One rounding to fp32, kept in float64 (a contract intermediate)."""
    return x64.float().double()


def to_output(exact: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The contract's dequantized output: the fp32 product, then one rounding to dtype."""
    return exact.float().to(dtype)


@dataclass(frozen=True)
class FP8Reference:
    codes: torch.Tensor  # int64, E4M3 bit patterns (0x80 = sign)
    values: torch.Tensor  # float64 value of each code
    scales: torch.Tensor  # float64 holding fp32: [] or [..., groups_M, groups_K]
    quotients: torch.Tensor  # float64 holding fp32: x / scale, before rounding onto the grid
    dequantized: torch.Tensor  # float64, exact value * scale


def _group_index(shape, granularity):
    """Each element's group number (row-major over [..., groups_M, groups_K]) and that layout."""
    if FP8_GROUPS[granularity] is None:
        return torch.zeros(shape, dtype=torch.long), ()
    *lead, num_rows, num_cols = shape
    rows, cols = FP8_GROUPS[granularity]
    cols = cols or num_cols
    groups_m, groups_k = -(-num_rows // rows), -(-num_cols // cols)
    num_lead = int(torch.tensor(lead).prod()) if lead else 1
    lead_index = torch.arange(num_lead).reshape(*lead, 1, 1)
    index = (lead_index * groups_m + (torch.arange(num_rows) // rows)[:, None]) * groups_k \
        + (torch.arange(num_cols) // cols)[None, :]
    return index.expand(shape), (*lead, groups_m, groups_k)


def fp8_quantize(x: torch.Tensor, granularity: str) -> FP8Reference:
    """scale = fp32(amax(finite |x| of the group) / 448), 1.0 where that is 0;
    quotient = fp32(x / scale); code = round_to_grid(quotient, e4m3)."""
    x64 = x.double()
    index, layout = _group_index(x.shape, granularity)
    magnitude = torch.where(torch.isfinite(x64), x64.abs(), torch.zeros_like(x64))
    num_groups = int(index.max()) + 1 if index.numel() else 1
    amax = torch.zeros(num_groups, dtype=torch.float64).scatter_reduce(
        0, index.flatten(), magnitude.flatten(), "amax")
    scales = fp32(amax / E4M3_MAX)
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))
    per_element = scales[index]
    quotients = fp32(x64 / per_element)
    codes, values = round_to_grid(quotients, e4m3_grid(), E4M3_SIGN)
    return FP8Reference(codes, values, scales.reshape(layout), quotients, values * per_element)


@dataclass(frozen=True)
class NVFP4Reference:
    codes: torch.Tensor  # int64 [..., K], E2M1 bit patterns (0x8 = sign)
    values: torch.Tensor  # float64 E2M1 value of each code
    block_scale_codes: torch.Tensor  # int64 [..., K // 16], E4M3 bit patterns
    block_scales: torch.Tensor  # float64 [..., K // 16]
    block_scales_wanted: torch.Tensor  # float64 holding fp32, before the clamp and rounding
    global_scale: torch.Tensor  # float64 [] holding fp32
    quotients: torch.Tensor  # float64 [..., K] holding fp32: x / (block_scale / global_scale)
    dequantized: torch.Tensor  # float64 [..., K], exact value * (block_scale / global_scale)


def nvfp4_quantize(x: torch.Tensor) -> NVFP4Reference:
    """global = fp32(2688 / amax(x)) (1.0 if not finite); wanted = fp32(fp32(amax(block) / 6) *
    global); block = round_to_grid(clamp(wanted, 2^-9, 448), e4m3); step = fp32(block / global);
    quotient = fp32(x / step); code = round_to_grid(quotient, e2m1) (|q| > 6 saturates)."""
    x64 = x.double()
    global_scale = fp32(torch.tensor(E4M3_MAX * E2M1_MAX, dtype=torch.float64) / x64.abs().max())
    if not bool(torch.isfinite(global_scale)):
        global_scale = torch.tensor(1.0, dtype=torch.float64)
    blocks = x64.reshape(*x.shape[:-1], x.shape[-1] // 16, 16)
    wanted = fp32(fp32(blocks.abs().amax(dim=-1) / E2M1_MAX) * global_scale)
    scale_codes, block_scales = round_to_grid(wanted.clamp(2.0 ** -9, E4M3_MAX), e4m3_grid(), E4M3_SIGN)
    step = fp32(block_scales / global_scale).unsqueeze(-1)
    quotients = fp32(blocks / step)
    codes, values = round_to_grid(quotients, e2m1_grid(), E2M1_SIGN)
    return NVFP4Reference(codes.reshape(x.shape), values.reshape(x.shape), scale_codes, block_scales,
                          wanted, global_scale, quotients.reshape(x.shape), (values * step).reshape(x.shape))
