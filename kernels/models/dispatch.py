"""The single door every region call goes through: (region, case, layer) -> the contract's
implementation. Tracing hooks in here, for both runtimes: observers see every call (its
inputs and output) as a DoorCall, after the implementation ran.

Head calls (lm_head, sampler, logprob) work on a selection of the forward's rows (the rows
that predict a sampled or scored token); the runtime names them with `selecting_rows`, so a
tracer can tell which token each head row belongs to.
"""
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

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


class RegionDispatch:
    """Calls region implementations from a contract; optional observers see every call."""

    def __init__(self, contract, observers=()):
        self.contract = contract
        self.observers = list(observers)
        self.row_selection = None

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
            call = DoorCall(region, case, layer, args, kwargs, output, self.row_selection)
            for observe in self.observers:
                observe(call)
