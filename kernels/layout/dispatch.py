"""The region door under a layout: the regions a layout splits run the contract's
implementation in the contract's layout arithmetic (kernels/layout/policy.py): the linear
regions column- or row-parallel, logprob vocab-parallel, expert_gemm and moe_combine
expert-parallel. Every other region (norms, attention, SSM, router, the relu^2 MLPs) runs
whole on every rank: its inputs are the same bits on every rank, so are its outputs.
Observers see whole tensors, as at the single-process door (the logprob region's own
variant is replaced by the layout's vocab-parallel reduction).
"""
from functools import partial

from kernels.layout import expert_parallel, tensor_parallel
from kernels.layout.tensor_parallel import COLUMN_REGIONS, ROW_REGIONS
from kernels.models.dispatch import RegionDispatch


def check_layout(layout, config, side: str) -> None:
    """ValueError naming the degree that does not fit this side or this model."""
    if side == "engine" and layout.dp > 1:
        raise ValueError(f"dp: the engine is one data-parallel replica (got {layout}); run one "
                         f"engine per replica: a request's bits do not depend on the others (C2)")
    experts = getattr(config, "n_routed_experts", 0) if "moe" in getattr(config, "block_types", ()) else 0
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
