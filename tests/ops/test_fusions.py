"""Region chains run as one launch (kernels/ops/fusions.py, RegionDispatch.fused): which
bindings fuse, that anything else runs region by region, and that observers see every link
of a fused chain as if it had run alone. The fused kernel's bits (those of the launches it
replaces) are tests/ops/triton/test_fused_rows.py's check, and C07 on the device."""
import torch

from kernels.contract import load_contract
from kernels.contract.contract import Binding
from kernels.contract.dispatch import RegionDispatch
from kernels.contract.regions import CASES
from kernels.ops import fusions
from kernels.ops.fusions import QK_NORM_ROPE, fused_for


def _bindings(contract, case):
    return [contract.binding(region, case) for region in QK_NORM_ROPE]


def test_the_shipped_contracts_fuse_qk_norm_and_rope_where_they_bind_the_fused_pair():
    """consistent in every case; fast in the engine's (its trainer norms transformers-style)."""
    consistent, fast = load_contract("consistent"), load_contract("fast")
    for case in CASES:
        assert fused_for(QK_NORM_ROPE, _bindings(consistent, case)) is not None, case
        assert (fused_for(QK_NORM_ROPE, _bindings(fast, case)) is not None) == case.startswith("engine"), case


def test_a_binding_the_table_does_not_name_runs_region_by_region():
    consistent = _bindings(load_contract("consistent"), "engine_decode")
    planted = [Binding("qk_norm", "engine_decode", "norm.planted_triton_lanes_by_rows", ()), consistent[1]]
    mixed = [consistent[0], load_contract("fast").binding("rope", "engine_decode")]
    pinned = [Binding("qk_norm", "engine_decode", "norm.consistent", (("block", 64),)), consistent[1]]
    for bindings in (planted, mixed, pinned):
        assert fused_for(QK_NORM_ROPE, bindings) is None, bindings


def test_on_the_cpu_the_fused_door_declines(fresh_seed):
    gen = torch.Generator().manual_seed(fresh_seed)
    q, k = torch.randn(3, 4, 8, generator=gen), torch.randn(3, 2, 8, generator=gen)
    seen = []
    dispatch = RegionDispatch(load_contract("consistent"), [seen.append])
    assert dispatch.fused(QK_NORM_ROPE, "engine_decode", 0, q, k, torch.ones(8), torch.ones(8), torch.arange(3),
                          eps=1e-6, theta=1e6, max_position=64) is None
    assert seen == []


def test_observers_see_each_link_of_a_fused_chain(monkeypatch, fresh_seed):
    """A fused function's links reach the observers as separate door calls, in order."""
    gen = torch.Generator().manual_seed(fresh_seed)
    outputs = [torch.randn(2, generator=gen) for _ in range(4)]

    def fake(q, k, q_weight, k_weight, positions, *, eps, theta, max_position):
        return (outputs[2], outputs[3]), (("qk_norm", (q, q_weight), {"eps": eps}, (outputs[0], None)),
                                          ("qk_norm", (k, k_weight), {"eps": eps}, (outputs[1], None)),
                                          ("rope", (outputs[0], outputs[1], positions), {}, (outputs[2], outputs[3])))
    monkeypatch.setitem(fusions.FUSED, QK_NORM_ROPE, {("norm.consistent", "rope.consistent"): fake})
    seen = []
    dispatch = RegionDispatch(load_contract("consistent"), [seen.append])
    out = dispatch.fused(QK_NORM_ROPE, "engine_decode", 3, "q", "k", "wq", "wk", "pos", eps=1e-6, theta=1.0,
                         max_position=8)
    assert out == (outputs[2], outputs[3])
    assert [(c.region, c.layer, c.case) for c in seen] == [("qk_norm", 3, "engine_decode")] * 2 + [
        ("rope", 3, "engine_decode")]
    assert seen[0].args == ("q", "wq") and seen[1].output[0] is outputs[1] and seen[2].args[0] is outputs[0]
