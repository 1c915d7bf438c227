"""A side's parallel layout Layout(tp, ep, dp), world size tp * ep * dp, and a deployment's pair.

Rank r sits at (d, e, t) with r = (d * ep + e) * tp + t: TP groups are runs of tp consecutive
ranks, EP groups stride tp, DP groups stride ep * tp. Config text: "TP2 EP4" (any order, any
case, missing degrees 1) or {tp: 2, ep: 4}; `load_side_layouts(path)` reads {engine: ...,
trainer: ...} from YAML.
"""
import re
from dataclasses import dataclass

from kernels.strict_yaml import load_yaml

AXES = ("tp", "ep", "dp")


@dataclass(frozen=True, slots=True)
class Layout:
    """How one side is split over processes."""

    tp: int = 1
    """Tensor-parallel degree: the linear regions' N or K, and the vocabulary, over tp ranks."""
    ep: int = 1
    """Expert-parallel degree: the routed experts over ep ranks (tokens dispatched all-to-all)."""
    dp: int = 1
    """Data-parallel degree: replicas that each take a share of the micro-batches."""

    def __post_init__(self):
        for name in AXES:
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"{name}: must be a positive integer, got {value!r}")

    @property
    def world_size(self) -> int:
        return self.tp * self.ep * self.dp

    def coordinates(self, rank: int) -> tuple:
        """(dp_index, ep_index, tp_index) of a rank in [0, world_size)."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank: {rank} is outside a layout of {self.world_size} ranks")
        return rank // (self.ep * self.tp), rank // self.tp % self.ep, rank % self.tp

    def __str__(self) -> str:
        return f"TP{self.tp} EP{self.ep} DP{self.dp}"

    @classmethod
    def parse(cls, text: str) -> "Layout":
        """'TP2 EP4' -> Layout(tp=2, ep=4); ValueError naming the word it cannot read."""
        degrees = {}
        for word in re.split(r"[\s,/]+", str(text).strip()):
            match = re.fullmatch(r"(tp|ep|dp)(\d+)", word.lower())
            if not match:
                raise ValueError(f"layout {text!r}: cannot read {word!r} (expected e.g. 'TP2 EP4 DP1')")
            if match.group(1) in degrees:
                raise ValueError(f"layout {text!r}: {match.group(1)} given twice")
            degrees[match.group(1)] = int(match.group(2))
        return cls(**degrees)

    @classmethod
    def from_config(cls, raw, where: str = "layout") -> "Layout":
        """From 'TP2 EP4' or {tp: 2, ep: 4}; ValueError naming `where`."""
        try:
            if isinstance(raw, str):
                return cls.parse(raw)
            if not isinstance(raw, dict):
                raise ValueError(f"expected 'TP2 EP4' or a mapping of {AXES}, got {raw!r}")
            unknown = sorted(set(raw) - set(AXES))
            if unknown:
                raise ValueError(f"unknown keys {unknown}; known: {list(AXES)}")
            return cls(**raw)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from error


@dataclass(frozen=True, slots=True)
class SideLayouts:
    """The layouts of the two sides of one deployment, named separately."""

    engine: Layout
    """The rollout engine's layout."""
    trainer: Layout
    """The trainer's layout."""

    @classmethod
    def from_config(cls, raw, where: str = "layouts") -> "SideLayouts":
        if not isinstance(raw, dict) or set(raw) != {"engine", "trainer"}:
            raise ValueError(f"{where}: expected a mapping with exactly 'engine' and 'trainer', got {raw!r}")
        return cls(Layout.from_config(raw["engine"], f"{where}.engine"),
                   Layout.from_config(raw["trainer"], f"{where}.trainer"))

    def __str__(self) -> str:
        return f"engine {self.engine} vs trainer {self.trainer}"


def load_side_layouts(path) -> SideLayouts:
    """{engine: 'TP2', trainer: 'TP1 EP4'} from a YAML file."""
    return SideLayouts.from_config(load_yaml(path, "layouts"), str(path))
