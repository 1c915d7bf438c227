"""Gates C00 (apparatus) and C10 (performance): C00's identity check fails on other weights,
another contract or another transport, its comm condition on another backend or transport,
its judging-code check sees modified and untracked files; C10 fails when the floor is out
of reach (its negative control)."""
import json
import subprocess

import pytest

from gates import test_c00_apparatus as c00
from gates.apparatus import identity_mismatches, modified_judging_files
from gates.baseline import read_frozen
from gates.conftest import GateRecord
from gates.workload import seeded_weights
from harness.cli import EXIT_DIFFERENT, main
from kernels.contract import load_contract
from kernels.contract.identity import identities
from kernels.models.config import load_model_config
from tests.candidate_trees import judge_workers_on, tree_with


def test_identity_check_names_what_differs():
    config = load_model_config("qwen3-cut")
    consistent, weights = load_contract("consistent"), seeded_weights(config, 0)
    reference = identities(config, weights, consistent)
    assert identity_mismatches(reference, identities(config, weights, consistent)) == []
    assert identity_mismatches(reference, identities(config, seeded_weights(config, 1), consistent)) == ["semantic"]
    assert identity_mismatches(reference, identities(config, weights, load_contract("fast"))) == ["numerical_policy"]
    assert identity_mismatches(reference, identities(config, weights, consistent,
                                                     comm_backend="gloo")) == ["deployment"]
    gloo = identities(config, weights, consistent, comm_backend="gloo", comm_transport="tcp on lo")
    assert identity_mismatches(gloo, identities(config, weights, consistent, comm_backend="gloo",
                                                comm_transport="tcp on eth0")) == ["deployment"]


NCCL_TRAINER = """
from kernels.trainer import trainer as _trainer
_built = _trainer.Trainer.__init__
def _on_nccl(self, *args, **kwargs):
    _built(self, *args, **kwargs)
    self.comm = {"comm_backend": "nccl", "comm_transport": "nccl 2.21.5 NCCL_ALGO=auto"}
_trainer.Trainer.__init__ = _on_nccl
"""


def test_c00_fails_when_the_sides_use_another_transport(tmp_path, monkeypatch):
    """A candidate whose trainer reports NCCL while its engine has no comm: both sides are
    built in the candidate's workers, and the judge sees the transports differ."""
    judge_workers_on(tree_with(tmp_path / "candidate", NCCL_TRAINER), tmp_path, monkeypatch)
    monkeypatch.setattr(c00, "verify_frozen", lambda **_: ([], {}))  # not what this test is about
    record = GateRecord("C00", "qwen3", "consistent")
    with pytest.raises(AssertionError, match="condition"):
        c00.test_apparatus(record)
    status = {c["name"]: c for c in record.conditions}
    comm = status["engine and trainer use the same comm backend and transport"]
    assert comm["status"] == "fail" and comm["engine"]["comm_backend"] == "none"
    assert comm["trainer"]["comm_backend"] == "nccl"
    identities_condition = status["identities equal (semantic, numerical_policy, deployment)"]
    assert identities_condition["status"] == "fail" and identities_condition["mismatches"] == ["deployment"]


def test_judging_code_check_sees_edits_and_new_files(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "gates").mkdir()
    (tmp_path / "gates" / "gate.py").write_text("PASS = True\n")
    git("init", "-q")
    git("-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base")
    assert modified_judging_files(root=tmp_path) == []
    (tmp_path / "gates" / "gate.py").write_text("PASS = 'always'\n")
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "bypass.py").write_text("")
    (tmp_path / ".agents").mkdir()
    (tmp_path / ".agents" / "SKILL.md").write_text("skip the gates")
    assert modified_judging_files(root=tmp_path) == [".agents/SKILL.md", "gates/gate.py", "harness/bypass.py"]
    assert modified_judging_files(base="no-such-commit", root=tmp_path)[0].startswith("(git could not compare")


def test_c00_through_the_harness(tmp_path):
    main(["gates", "--model", "qwen3", "--only", "C0", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "C00.json").read_text())
    status = {c["name"]: c["status"] for c in result["conditions"]}
    assert status["identities equal (semantic, numerical_policy, deployment)"] == "pass"
    assert status["engine and trainer use the same comm backend and transport"] == "pass"
    expected = "pass" if not modified_judging_files() else "fail"
    assert status["the judge, the baseline record and the rules unmodified since the base commit"] == expected
    assert status["baseline frozen and its hash verified"] == ("pass" if read_frozen() else "fail")
    assert status["the judging process loaded no module of the code under test"] == "pass"


def test_c10_fails_when_the_floor_is_out_of_reach(tmp_path, monkeypatch):
    monkeypatch.setenv("BITWISE_C10_FLOOR", "1000000")
    monkeypatch.setenv("BITWISE_C10_PAIRS", "1")  # one timed pair is enough to fail the floor
    assert main(["gates", "--model", "qwen3", "--only", "C10", "--out", str(tmp_path)]) == EXIT_DIFFERENT
    result = json.loads((tmp_path / "C10.json").read_text())
    measured = next(c for c in result["conditions"] if c["name"].startswith("rollout throughput ratio"))
    assert result["status"] == "fail" and measured["status"] == "fail" and measured["ratio"] > 0
    assert len(measured["samples_tokens_per_s"]["baseline"]) == 1 and result["inputs"][0]["pairs"] == 1
    assert all(c["status"] == "pass" for c in result["conditions"] if c is not measured)  # outputs checked


def test_c10_verdict_needs_the_noise_clear_of_the_floor():
    from gates.ratio_verdict import decide, median_rank
    assert [median_rank(n) for n in (1, 3, 5, 6, 9)] == [1, 1, 1, 2, 3]
    clear = decide([0.81, 0.92, 0.77, 0.88, 0.85], 0.70)
    assert clear.status == "pass" and (clear.low, clear.high) == (0.77, 0.92) and clear.coverage >= 0.75
    below = decide([0.51, 0.62, 0.58], 0.70)
    assert below.status == "fail" and below.ratio == 0.58
    straddling = decide([0.26, 0.985, 0.80], 0.70)  # issue 19's busy machine: one pair at 0.26
    assert straddling.status == "inconclusive" and straddling.ratio == 0.80
    alone = decide([0.4], 0.70)
    assert alone.status == "fail" and alone.coverage == 0.0  # one pair: a point, no noise estimate


def test_an_inconclusive_condition_is_never_a_pass(tmp_path):
    from gates.conftest import GateRecord, _status
    record = GateRecord("C10", "qwen3", "consistent")
    record.check("outputs equal", True)
    record.check_inconclusive("ratio >= floor, beyond the noise", ratio=0.71, noise=[0.6, 0.8])
    assert _status([record]) == "inconclusive"
    with pytest.raises(AssertionError, match="inconclusive"):
        record.verdict()
    record.check("another", False)
    assert _status([record]) == "fail"
