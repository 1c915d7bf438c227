"""Bit-pattern equality. Identity claims compare integer views, never allclose:
torch.equal lets +0.0 equal -0.0 and NaN never equal itself; bits do neither. The judge's
workers (gates/candidate.py) send fp32 values as int32 bit lists and whole tensors as sha256
digests: the helpers at the end write and read them."""
from dataclasses import dataclass
from hashlib import sha256

import torch

_INT_VIEW = {torch.float32: torch.int32, torch.float64: torch.int64, torch.bfloat16: torch.int16,
             torch.float16: torch.int16, torch.float8_e4m3fn: torch.int8, torch.float8_e5m2: torch.int8}


def bit_view(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as signed integers of the same width (integers pass through)."""
    tensor = tensor.detach().contiguous()
    if tensor.dtype in _INT_VIEW:
        return tensor.view(_INT_VIEW[tensor.dtype])
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        raise TypeError(f"no integer view for {tensor.dtype}")
    return tensor


def _ordered(bits: torch.Tensor) -> torch.Tensor:
    """Map sign-magnitude float bits onto a monotone integer line (for ULP distance)."""
    wide = bits.long()
    width = bits.element_size() * 8
    sign_mask = 1 << (width - 1)
    return torch.where(wide < 0, -(wide & (sign_mask - 1)), wide)


@dataclass(frozen=True)
class BitDiff:
    """The first differing element and how many differ."""
    index: tuple
    left: float
    right: float
    left_bits: int
    right_bits: int
    ulps: int
    width_bits: int
    num_differing: int
    numel: int

    def __str__(self) -> str:
        mask, digits = (1 << self.width_bits) - 1, self.width_bits // 4
        return (f"{self.num_differing}/{self.numel} elements differ; first at {self.index}: "
                f"{self.left!r} (0x{self.left_bits & mask:0{digits}x}) vs {self.right!r} "
                f"(0x{self.right_bits & mask:0{digits}x}), {self.ulps} ulp")


def first_bit_difference(left: torch.Tensor, right: torch.Tensor):
    """None when the two tensors are bitwise identical, else a BitDiff."""
    if left.shape != right.shape or left.dtype != right.dtype:
        raise ValueError(f"cannot compare {tuple(left.shape)}/{left.dtype} "
                         f"with {tuple(right.shape)}/{right.dtype}")
    left_bits, right_bits = bit_view(left), bit_view(right)
    differing = left_bits != right_bits
    count = int(differing.sum())
    if count == 0:
        return None
    flat = int(differing.flatten().nonzero()[0])
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), left.shape))
    lb, rb = int(left_bits.flatten()[flat]), int(right_bits.flatten()[flat])
    ulps = abs(int(_ordered(left_bits.flatten()[flat:flat + 1])) - int(_ordered(right_bits.flatten()[flat:flat + 1])))
    return BitDiff(index, float(left.flatten()[flat]), float(right.flatten()[flat]), lb, rb, ulps,
                   left_bits.element_size() * 8, count, left.numel())


def first_differences(actual, expected) -> str:
    """'identical', or the first differing element of each pair of tensors (or of tuples of
    tensors, position by position) that differ."""
    pairs = zip(*(tuple(t) if isinstance(t, (tuple, list)) else (t,) for t in (actual, expected)))
    found = [first_bit_difference(a, e) for a, e in pairs]
    return "; ".join(str(d) for d in found if d is not None) or "identical"


def assert_bitwise_equal(left, right, what: str = "tensors") -> None:
    """AssertionError with the first differing element when the bits differ."""
    difference = first_bit_difference(left, right)
    if difference is not None:
        raise AssertionError(f"{what}: {difference}")


def bit_figures(left: list, right: list, labels: list) -> dict:
    """Two lists of tensors compared pairwise: elements compared, how many differ, and the
    first difference with its label (what a gate records for a bit condition)."""
    differences = [first_bit_difference(a, b) for a, b in zip(left, right)]
    first = next((f"{label}: {d}" for label, d in zip(labels, differences) if d is not None), None)
    return {"num_compared": sum(t.numel() for t in left),
            "num_differing": sum(d.num_differing for d in differences if d), "first_difference": first}


def int32_bits(values: torch.Tensor) -> list:
    """fp32 values as a list of int32 bit patterns (JSON carries them exactly)."""
    return values.detach().float().cpu().contiguous().view(torch.int32).tolist()


def from_int32_bits(bit_lists) -> list:
    """fp32 tensors from lists of int32 bit patterns (int32_bits' inverse)."""
    return [torch.tensor(bits, dtype=torch.int32).view(torch.float32) for bits in bit_lists]


def tensor_digest(tensor: torch.Tensor) -> str:
    """sha256 of the tensor's bytes (empty tensors included)."""
    data = tensor.detach().cpu().contiguous()
    return sha256(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"").hexdigest()


def differing_values(left: list, right: list) -> int:
    """Positions where two lists of int32 bit lists differ, a missing or extra value or list
    counting as one."""
    return sum(sum(a != b for a, b in zip(x, y)) + abs(len(x) - len(y)) for x, y in zip(left, right)) \
        + abs(len(left) - len(right))
