"""Programmatic dependent launch (kernels/ops/pdl.py): off unless asked and on a CUDA device of
compute capability 9+; and the rule that makes it safe, checked in the source of every Triton
module: a kernel that takes the PDL constexpr begins with `wait_for_inputs(PDL)` (nothing is read
before the grid before it has finished), and a launch that passes `launch_options` launches such a
kernel. A kernel that loads before it waits, or a launch of a kernel without the wait, fails it."""
import ast
from pathlib import Path

import pytest
import torch

from gates.switches import SWITCHES
from kernels.ops import pdl

OPS = Path(__file__).resolve().parents[3] / "kernels" / "ops"


def _is_jit(node) -> bool:
    return any("triton.jit" in ast.unparse(d) for d in node.decorator_list)


def violations(source: str, name: str) -> list:
    """What breaks the rule in one module's source."""
    tree, found = ast.parse(source), []
    kernels = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and _is_jit(node)}
    waiting = set()
    for kernel in kernels.values():
        if "PDL" not in [a.arg for a in kernel.args.args]:
            continue
        body = [s for s in kernel.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if body and ast.unparse(body[0]) == "wait_for_inputs(PDL)":
            waiting.add(kernel.name)
        else:
            found.append(f"{name}: {kernel.name} takes PDL but does not begin with wait_for_inputs(PDL)")
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and any(isinstance(k.value, ast.Call) and k.arg is None
                                                   and ast.unparse(k.value.func) == "launch_options"
                                                   for k in call.keywords)):
            continue
        launched = call.func.value if isinstance(call.func, ast.Subscript) else call.func
        if ast.unparse(launched) not in waiting:
            found.append(f"{name}: {ast.unparse(launched)} is launched with launch_options but does not wait")
    return found


def test_every_kernel_launched_with_pdl_waits_before_it_reads():
    modules = sorted(OPS.rglob("*.py"))
    launching = [p for p in modules if "launch_options(" in p.read_text() and p.name != "pdl.py"]
    assert len(launching) >= 6, launching  # norm, activation, attention, linear, q/k norm + RoPE, K/V write
    for path in launching:
        assert violations(path.read_text(), path.name) == []


def test_the_rule_catches_a_load_before_the_wait_and_a_launch_without_it():
    early_load = '''
@triton.jit
def _k(x_ptr, PDL: tl.constexpr):
    x = tl.load(x_ptr)
    wait_for_inputs(PDL)

def launch(x):
    _k[(1,)](x, **launch_options(x.device))
'''
    found = violations(early_load, "planted")
    assert len(found) == 2 and "does not begin" in found[0] and "does not wait" in found[1]
    no_wait = '''
@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr, 1.0)

def launch(x):
    _k[(1,)](x, BLOCK=16, **launch_options(x.device))
'''
    assert violations(no_wait, "planted") == ["planted: _k is launched with launch_options but does not wait"]


@pytest.mark.parametrize("asked", [None, "1"])
def test_pdl_is_off_on_the_cpu_and_unless_asked(asked, monkeypatch):
    if asked is None:
        monkeypatch.delenv("BITWISE_PDL", raising=False)
    else:
        monkeypatch.setenv("BITWISE_PDL", asked)
    assert pdl.launch_options(torch.device("cpu")) == {"PDL": False, "launch_pdl": False}
    if torch.cuda.is_available() and asked is None:
        assert pdl.launch_options(torch.device("cuda")) == {"PDL": False, "launch_pdl": False}


def test_a_bad_value_is_an_error_naming_the_switch(monkeypatch):
    monkeypatch.setenv("BITWISE_PDL", "yes")
    with pytest.raises(ValueError, match="BITWISE_PDL='yes': 0 or 1"):
        pdl.launch_options(torch.device("cpu"))
    assert pdl.ENV in SWITCHES
