"""Gate C05: graph == eager.

Passes when CUDA-graph replays of the engine's decode steps give the bits of eager execution,
with capture at dummy sizes baking no shape shortcut. torch.compile is not used by the
consistent path, so there is no compiled variant to compare: the gate verifies that claim by
parsing every source that decides bits (kernels.contract.identity.policy_source_files and the
file of every implementation the contract binds) for torch.compile or torch._dynamo, and those
sources for CUDA-graph capture. On a machine without CUDA the gate is n/a ("no CUDA device:
CUDA graphs need a GPU"); on a GPU it is n/a until the engine captures graphs (the Triton
issue). The scan is a precondition of the n/a, not a pass condition: its result is kept under
the inputs and only a finding becomes a condition, a failing one, since compiled code runs on
CPU too and would then have to be compared here (a gate with a passing condition would report
"pass", not "n/a"). Negative control: a scanned source that calls torch.compile turns the n/a
into a fail (tests/test_gate_c04_c09.py exercises the scan).
"""
import ast
import inspect
from pathlib import Path

import torch

from kernels.contract import load_contract
from kernels.contract.identity import policy_source_files
from kernels.ops import registry

COMPILERS = ("compile", "_dynamo")
GRAPH_CALLS = ("CUDAGraph", "make_graphed_callables")


def _uses_compile(node) -> bool:
    """torch.compile / torch._dynamo used as an attribute or imported (code only, not docstrings)."""
    if isinstance(node, ast.Attribute):
        return node.attr in COMPILERS and isinstance(node.value, ast.Name) and node.value.id == "torch"
    if isinstance(node, ast.ImportFrom):
        return node.module == "torch._dynamo" or (
            node.module == "torch" and any(alias.name in COMPILERS for alias in node.names))
    return isinstance(node, ast.Import) and any(alias.name.startswith("torch._dynamo") for alias in node.names)


def compile_uses(paths) -> list:
    """'path:line' of every use of torch.compile or torch._dynamo in the given sources."""
    return [f"{path}:{node.lineno}" for path in paths
            for node in ast.walk(ast.parse(Path(path).read_text())) if _uses_compile(node)]


def scanned_sources(contract) -> list:
    """The policy sources and the file of every implementation the contract binds."""
    bound = {inspect.getsourcefile(registry.implementation(b.impl)) for b in contract.bindings.values()}
    return sorted({str(p) for p in policy_source_files()} | bound)


def test_graph_replay_equals_eager(gate):
    sources = scanned_sources(load_contract(gate.contract))
    uses = compile_uses(sources)
    captures = [f"{path}: {name}" for path in sources for name in GRAPH_CALLS if name in Path(path).read_text()]
    gate.inputs = {"scanned_sources": len(sources), "torch_compile_uses": uses, "graph_captures": captures}
    if uses or captures:
        gate.check("the consistent path uses no torch.compile and the engine captures no graph "
                   "(else this gate must compare them with eager)", False, torch_compile_uses=uses,
                   graph_captures=captures)
        gate.verdict()
    if not torch.cuda.is_available():
        gate.n_a("no CUDA device: CUDA graphs need a GPU")
    gate.n_a("the engine captures no CUDA graphs yet: nothing to replay (lands with the Triton kernels)")
