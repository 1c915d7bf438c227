"""Hazard evidence: a gate that claims to cover exact ties, signed zeros, subnormals or
ragged/empty rows counts them in the inputs it actually used, records the counts in its
result, and fails as *vacuous* when a claimed hazard never occurred."""
import torch


class VacuousGate(AssertionError):
    """The inputs did not contain a hazard the gate claims to cover."""


class HazardEvidence:
    """Counts per hazard name; `require` fails for any claimed hazard counted zero times."""

    def __init__(self):
        self.counts: dict[str, int] = {}

    def add(self, name: str, count: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + int(count)

    def require(self, *names: str) -> None:
        absent = [name for name in names if self.counts.get(name, 0) == 0]
        if absent:
            raise VacuousGate(f"vacuous: no {', '.join(absent)} in the inputs (counts {self.counts})")


def count_topk_boundary_ties(keys: torch.Tensor, k: int) -> int:
    """Rows whose k-th and (k+1)-th largest keys are exactly equal (the choice is a tie)."""
    if keys.shape[-1] <= k:
        return 0
    top = torch.sort(keys, dim=-1, descending=True).values
    return int((top[..., k - 1] == top[..., k]).sum())


def count_negative_zeros(t: torch.Tensor) -> int:
    t = t.float()
    return int(((t == 0) & torch.signbit(t)).sum())


def count_subnormals(t: torch.Tensor) -> int:
    tiny = torch.finfo(t.dtype).tiny
    return int(((t != 0) & (t.abs() < tiny)).sum())
