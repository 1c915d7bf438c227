"""Gate C06 through `harness gates`: the consistent contract passes on both model cuts (the
expert-parallel pair n/a on qwen3, which has no experts); layouts that reduce in rank order
fail it, on the bits (negative controls): the consistent regions with the fast contract's
layout arithmetic fail every TP, EP and gradient pair while DP scoring still agrees (batch
invariance, C2, is enough there), and the fast contract fails as well.
"""
import json

import pytest
import yaml

from gates.workload import Workload
from harness.cli import EXIT_DIFFERENT, EXIT_OK, main
from kernels.contract.contract import CONTRACT_DIR

TP_PAIRS = ("engine TP2 EP1 DP1 vs trainer TP1 EP1 DP1: per-token log-probs bitwise equal",
            "engine TP2 EP1 DP1 vs trainer TP4 EP1 DP1: per-token log-probs bitwise equal")
EXPERT_PAIRS = ("engine TP1 EP2 DP1 vs trainer TP1 EP4 DP1: per-token log-probs bitwise equal",
                "engine TP1 EP2 DP1 vs trainer TP1 EP1 DP1: per-token log-probs bitwise equal",
                "engine TP2 EP1 DP1 vs trainer TP2 EP2 DP1: per-token log-probs bitwise equal")
DP_SCORES = "trainer TP1 EP1 DP2 vs trainer TP1 EP1 DP1: per-token log-probs bitwise equal"
DP_GRADIENTS = "trainer TP1 EP1 DP2 vs trainer TP1 EP1 DP1: one GRPO update's reduced gradients bitwise equal"


def _c06(tmp_path, model, contract="consistent"):
    out = tmp_path / f"{model}-{len(list(tmp_path.iterdir()))}"
    code = main(["gates", "--model", model, "--only", "C6", "--contract", str(contract), "--out", str(out)])
    return code, json.loads((out / "C06.json").read_text())


def _statuses(result) -> dict:
    return {c["name"]: c["status"] for c in result["conditions"]}


@pytest.mark.parametrize("model", ["qwen3", "nemotron"])
def test_consistent_contract_passes(tmp_path, model):
    code, result = _c06(tmp_path, model)
    statuses = _statuses(result)
    assert code == EXIT_OK and result["status"] == "pass", statuses
    assert [statuses[name] for name in EXPERT_PAIRS] == ["n/a" if model == "qwen3" else "pass"] * 3
    assert {name for name, status in statuses.items() if status != "pass"} <= set(EXPERT_PAIRS)
    pairs = [c for c in result["conditions"] if c["name"] in (*TP_PAIRS, *EXPERT_PAIRS, DP_SCORES, DP_GRADIENTS)]
    assert all(c["num_compared"] > 0 for c in pairs if c["status"] == "pass")
    assert len([c for c in pairs if c["status"] == "pass"]) == (4 if model == "qwen3" else 7)
    assert result["inputs"][0]["world_size"] == 4
    crossed = next(c for c in result["conditions"] if c["name"].startswith("contexts crossed a key block"))
    assert crossed["status"] == "pass" and crossed["coverage"]["key_blocks_crossed"] > 0, crossed


def test_rank_order_layouts_fail_on_the_bits(tmp_path):
    document = yaml.safe_load((CONTRACT_DIR / "consistent.yaml").read_text())
    document["name"] = "consistent-with-rank-order-layouts"
    document["layout"] = {"tp_reduce": "rank_order", "ep_combine": "rank_order", "dp_reduce": "rank_order"}
    path = tmp_path / "rank-order.yaml"
    path.write_text(yaml.safe_dump(document))
    code, result = _c06(tmp_path, "nemotron", path)
    failed = {name for name, status in _statuses(result).items() if status == "fail"}
    assert code == EXIT_DIFFERENT and failed == {*TP_PAIRS, *EXPERT_PAIRS, DP_GRADIENTS}


def test_fast_contract_fails(tmp_path):
    code, result = _c06(tmp_path, "qwen3", "fast")
    failed = {name for name, status in _statuses(result).items() if status == "fail"}
    assert code == EXIT_DIFFERENT and {*TP_PAIRS, DP_GRADIENTS} <= failed


def test_pairs_beyond_the_ranks_here_are_n_a_with_the_count(monkeypatch):
    """As on a 2-GPU machine: the pairs that fit in 2 ranks run and pass, the others (and the
    claimed TP4) are n/a naming the count, never passed."""
    from gates import test_c06_layout as c06
    from gates.conftest import GateRecord

    monkeypatch.setattr(c06, "CPU_RANKS", 2)
    monkeypatch.setattr(c06, "check_judge_clean", lambda gate: None)  # this test process imports kernels itself
    record = GateRecord("C06", "nemotron", "consistent")
    c06.test_layouts_give_identical_bits(record)
    statuses = _statuses({"conditions": record.conditions})
    two_rank = {TP_PAIRS[0], EXPERT_PAIRS[1], DP_SCORES, DP_GRADIENTS}
    assert {name for name in two_rank if statuses[name] == "pass"} == two_rank
    beyond = [c for c in record.conditions if c["name"] in (TP_PAIRS[1], EXPERT_PAIRS[0], EXPERT_PAIRS[2])]
    assert [c["status"] for c in beyond] == ["n/a"] * 3 and all("needs 4 ranks" in c["reason"] for c in beyond)
    assert statuses["claimed TP sizes [4] run"] == "n/a"
    assert record.inputs["world_size"] == 2


@pytest.mark.parametrize("key_block", [8, 32, 64, 100])
def test_the_layouts_workload_runs_every_context_past_the_key_block(key_block, fresh_seed):
    """C06's workload is sized from the contract's key block: every context crosses it, so the
    gate's crossing condition holds for any contract (a fixed 6-24 token prompt stopped short
    of a 64-key block)."""
    from gates.boundaries import coverage
    from gates.layout_plan import WORKLOAD, crossing_workload
    from gates.workload import make_requests
    contexts = [len(r.prompt) + r.max_new_tokens for r in make_requests(crossing_workload(fresh_seed, key_block), 500)]
    assert min(contexts) > key_block and coverage(contexts, key_block, key_block)["key_blocks_crossed"] > 0
    fixed = [len(r.prompt) + r.max_new_tokens for r in make_requests(Workload(seed=fresh_seed, **WORKLOAD), 500)]
    assert key_block < 36 or max(fixed) <= key_block  # the negative control: the fixed workload never crossed
