"""How a contract's layouts combine partial results across ranks (its `layout:` section).

fixed_tree: K (row-parallel), N (column-parallel) and V (log-prob) are cut into num_leaves leaves
whatever the TP degree; each leaf is reduced in fp32 where it lives and the leaf partials added by
one pairwise tree, so TP only moves partials. routing_order: expert outputs return to their token
(all-to-all) and combine in slot order. rank_order (the fast contract): one slice per rank, summed
by the transport or combined per rank, as engines do; the bits follow the degree.
"""
from dataclasses import dataclass

TP_REDUCES = ("fixed_tree", "rank_order")
EP_COMBINES = ("routing_order", "rank_order")
DP_REDUCES = ("fixed_tree", "rank_order")


@dataclass(frozen=True, slots=True)
class LayoutPolicy:
    """The contract's layout arithmetic (one for every degree)."""

    tp_reduce: str
    """fixed_tree (num_leaves leaves, one pairwise tree) | rank_order (one slice per rank, all_reduce)."""
    ep_combine: str
    """routing_order (all-to-all back, slot order) | rank_order (per-rank partial sums, all_reduce)."""
    dp_reduce: str
    """fixed_tree (whole micro-batches per rank, per-micro-batch gradients in one tree) |
    rank_order (sequences dealt round robin, gradients all_reduced)."""
    num_leaves: int | None = None
    """Leaves of the fixed tree (a power of two); only with tp_reduce fixed_tree."""

    def __post_init__(self):
        for name, choices in (("tp_reduce", TP_REDUCES), ("ep_combine", EP_COMBINES), ("dp_reduce", DP_REDUCES)):
            if getattr(self, name) not in choices:
                raise ValueError(f"layout.{name}: {getattr(self, name)!r} is not one of {choices}")
        if self.tp_reduce == "fixed_tree":
            leaves = self.num_leaves
            if type(leaves) is not int or leaves <= 0 or leaves & (leaves - 1):
                raise ValueError(f"layout.num_leaves: a power of two is needed for the fixed tree, got {leaves!r}")
        elif self.num_leaves is not None:
            raise ValueError("layout.num_leaves: only tp_reduce fixed_tree has leaves")

    def check_tp(self, tp: int) -> None:
        """ValueError unless the fixed tree's leaves split evenly over `tp` ranks."""
        if self.tp_reduce == "fixed_tree" and self.num_leaves % tp:
            raise ValueError(f"tp: {tp} ranks cannot share the contract's {self.num_leaves} leaves "
                             f"(layout.num_leaves must be a multiple of tp)")


def policy_from_mapping(raw) -> LayoutPolicy:
    """The `layout:` section of a contract YAML; ValueError naming what is wrong."""
    if not isinstance(raw, dict):
        raise ValueError("layout: expected a mapping {tp_reduce, ep_combine, dp_reduce, num_leaves}")
    fields = set(LayoutPolicy.__dataclass_fields__)
    unknown, missing = sorted(set(raw) - fields), sorted(fields - {"num_leaves"} - set(raw))
    if unknown or missing:
        raise ValueError(f"layout: unknown keys {unknown}, missing keys {missing}")
    return LayoutPolicy(**raw)
