"""The single door every region call goes through: (region, case, layer) -> the contract's
implementation. Observers (tracers) see every call, its inputs and output, as a DoorCall after
it ran. Under a layout the regions it splits run in the contract's layout arithmetic
(kernels/layout/policy.py): linear column- or row-parallel, logprob vocab-parallel, the experts
expert-parallel; every other region runs whole on every rank, its inputs the same bits there.
Head calls (lm_head, sampler, logprob) name their rows with `selecting_rows`; a call that works
on one sequence's state alone (DeepSeek-V4's compressors and indexer) names it with `for_segment`.
"""
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from kernels.layout import expert_parallel, tensor_parallel
from kernels.layout.tensor_parallel import COLUMN_REGIONS, ROW_REGIONS
from kernels.ops import registry
from kernels.ops.fusions import fused_for


@dataclass(frozen=True, slots=True)
class DoorCall:
    """One region call as an observer sees it."""

    region: str
    case: str
    layer: int | None
    """Layer index, None for embed and the head regions."""
    args: tuple
    kwargs: dict
    output: Any
    rows: Any = None
    """For head calls: [R] indices into the last forward's batch rows; None inside a forward."""
    segment: Any = None
    """For a call on one sequence alone: its Segment (its outputs are that sequence's, whole)."""


class RegionDispatch:
    """Calls region implementations from a contract; optional observers see every call."""

    def __init__(self, contract, observers=()):
        self.contract = contract
        self.observers = list(observers)
        self.row_selection = None
        self.segment = None

    @contextmanager
    def for_segment(self, segment):
        """Calls inside work on `segment`'s sequence alone."""
        self.segment = segment
        try:
            yield
        finally:
            self.segment = None

    @contextmanager
    def selecting_rows(self, rows):
        """Calls inside work on rows `rows` ([R] long) of the last forward's batch."""
        self.row_selection = rows
        try:
            yield
        finally:
            self.row_selection = None

    def __call__(self, region: str, case: str, layer, *args, **kwargs):
        output = self.contract.op(region, case)(*args, **kwargs)
        self.notify(region, case, layer, args, kwargs, output)
        return output

    def keeps_unfinished_chunk(self, region: str, case: str) -> bool:
        """Whether the stateful region's bound implementation keeps its unfinished chunk's rows."""
        return registry.keeps_unfinished_chunk(self.contract.binding(region, case).impl)

    def fused(self, chain: tuple, case: str, layer, *args, **kwargs):
        """The regions of `chain` in one launch (kernels/ops/fusions.py) when the contract binds
        each link to implementations fused there and the call allows it; None otherwise, and
        the caller calls each region. Observers see every link's call as if it ran alone."""
        function = fused_for(chain, [self.contract.binding(region, case) for region in chain])
        result = function(*args, **kwargs) if function is not None else None
        if result is None:
            return None
        output, links = result
        for region, link_args, link_kwargs, link_output in links:
            self.notify(region, case, layer, link_args, link_kwargs, link_output)
        return output

    def notify(self, region: str, case: str, layer, args, kwargs, output) -> None:
        """Show one finished region call to the observers."""
        if self.observers:
            call = DoorCall(region, case, layer, args, kwargs, output, self.row_selection, self.segment)
            for observe in self.observers:
                observe(call)


def routed_experts(config) -> int:
    """The model's routed experts an EP layout splits: a hybrid's only if it has MoE blocks."""
    routed = "moe" in config.block_types if hasattr(config, "block_types") else hasattr(config, "n_routed_experts")
    return getattr(config, "n_routed_experts", 0) if routed else 0


def check_layout(layout, config, side: str) -> None:
    """ValueError naming the degree that does not fit this side or this model."""
    if side == "engine" and layout.dp > 1:
        raise ValueError(f"dp: the engine is one data-parallel replica (got {layout}); run one "
                         f"engine per replica: a request's bits do not depend on the others (C2)")
    experts = routed_experts(config)
    if layout.ep > 1 and not experts:
        raise ValueError(f"ep: {config.family} has no routed experts to split over {layout.ep} ranks")
    if layout.ep > 1 and experts % layout.ep:
        raise ValueError(f"ep: {experts} routed experts do not split over {layout.ep} ranks")


class LayoutDispatch(RegionDispatch):
    """RegionDispatch whose split regions run across this rank's process groups."""

    def __init__(self, contract, groups, observers=()):
        super().__init__(contract, observers)
        if contract.layout is None:
            raise ValueError(f"contract {contract.name!r} has no layout section: it says nothing "
                             f"about how ranks combine partials")
        contract.layout.check_tp(groups.layout.tp)
        self.groups, self.policy = groups, contract.layout
        tp = dict(axis=groups.tp, policy=self.policy)
        routing = self.policy.ep_combine == "routing_order"
        self.routes = {
            **{region: partial(tensor_parallel.column_parallel, **tp) for region in COLUMN_REGIONS},
            **{region: partial(tensor_parallel.row_parallel, **tp) for region in ROW_REGIONS},
            "logprob": lambda op, *args, **kwargs: tensor_parallel.vocab_parallel_logprob(*args, **kwargs, **tp),
            "expert_gemm": partial(expert_parallel.routed_experts if routing else expert_parallel.local_experts,
                                   axis=groups.ep),
            "moe_combine": ((lambda op, *args: op(*args)) if routing
                            else partial(expert_parallel.rank_order_combine, axis=groups.ep)),
        }

    def __call__(self, region: str, case: str, layer, *args, **kwargs):
        route = self.routes.get(region)
        if route is None:
            return super().__call__(region, case, layer, *args, **kwargs)
        output = route(self.contract.op(region, case), *args, **kwargs)
        self.notify(region, case, layer, args, kwargs, output)
        return output


def make_dispatch(contract, observers=(), groups=None, *, config=None, side: str = "trainer"):
    """The door a runtime uses: single-process without groups, else the layout's."""
    if groups is None:
        return RegionDispatch(contract, observers)
    check_layout(groups.layout, config, side)
    return LayoutDispatch(contract, groups, observers)
