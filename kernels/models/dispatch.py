"""The single door every region call goes through: (region, case, layer) -> the contract's
implementation. Tracing (digests of each door's output) hooks in here, for both runtimes."""


class RegionDispatch:
    """Calls region implementations from a contract; optional observers see every output."""

    def __init__(self, contract, observers=()):
        self.contract = contract
        self.observers = list(observers)

    def __call__(self, region: str, case: str, layer, *args, **kwargs):
        output = self.contract.op(region, case)(*args, **kwargs)
        for observe in self.observers:
            observe(region, case, layer, output)
        return output
