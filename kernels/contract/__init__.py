"""The execution contract: every region x case -> an implementation and its pinned constants.

`load_contract("consistent")` or `load_contract(path)`; errors are ValueError at load time.
"""
from kernels.contract.contract import Binding, Contract, ContractError, load_contract

__all__ = ["Binding", "Contract", "ContractError", "load_contract"]
