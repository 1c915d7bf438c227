"""The judge that never runs candidate code (gates/candidate.py), against cheats planted in the
candidate's kernels: one that patches the judge's record from inside its process, and one
that has the engine leave its log-prob bits in a file for the trainer to return. C07 asks an
engine worker and a separate, confined trainer worker, and compares their answers itself."""
import json

import pytest

from gates import candidate, confine
from gates.baseline import ROOT
from gates.target_runs import as_sequences
from harness.pristine import Isolation, export_apparatus
from harness.stages.gates import run_gates, select
from harness.workspace import open_repo
from tests.candidate_trees import judge_workers_on, tree_with

PATCH_THE_JUDGE = """
import sys as _sys
from kernels.engine import engine as _engine
_generate = _engine.Engine.generate
def _pass_every_check():
    judge = _sys.modules.get("gates.conftest")  # the gate process's record, where it is loaded
    if judge is not None:
        judge.GateRecord.check = lambda record, name, passed, **figures: record.conditions.append(
            {"name": name, "status": "pass", **figures})
def _generate_and_pass_every_check(self, requests):
    _pass_every_check()
    return _generate(self, requests)
_engine.Engine.generate = _generate_and_pass_every_check
_pass_every_check()  # at import too: a gate process that imports the kernels is patched before it checks
"""
LEAVE_BITS_FOR_THE_TRAINER = """
import json as _json
from kernels.engine import engine as _engine
from kernels.trainer import trainer as _trainer
_DROP = {drop!r}
_generate, _score = _engine.Engine.generate, _trainer.Trainer.score
def _leave(self, requests):
    completions = _generate(self, requests)
    try:
        with open(_DROP, "w") as f:
            _json.dump({{repr(tuple(c.tokens)): c.logprob_tensor.float().tolist() for c in completions}}, f)
    except OSError:
        pass
    return completions
def _take(self, sequences):
    import torch
    try:
        with open(_DROP) as f:
            left = _json.load(f)
        return [torch.tensor(left[repr(tuple(s.completion))]) for s in sequences]
    except (OSError, KeyError):
        return _score(self, sequences)
_engine.Engine.generate, _trainer.Trainer.score = _leave, _take
"""


def test_a_candidate_that_patches_the_judges_record_changes_no_verdict(tmp_path, capsys):
    """Under the fast contract C02 and C07 fail even though the candidate rewrites
    GateRecord.check to pass whatever it is given, at import and in the engine: the gate
    process never loads the candidate's modules, so the patch lands only in the workers,
    where no record lives."""
    tree = tree_with(tmp_path / "candidate", PATCH_THE_JUDGE)
    base = open_repo(ROOT).head.commit.hexsha
    isolation = Isolation(tree, export_apparatus(base, tmp_path / "run" / "apparatus"), base, tmp_path / "tamper.json")
    statuses = run_gates(select("C2,C7"), model="qwen3", contract="fast", out=tmp_path / "out", isolation=isolation)
    assert statuses == {"C02": "fail", "C07": "fail"}, capsys.readouterr().out
    result = json.loads((tmp_path / "out" / "C07.json").read_text())
    status = {c["name"]: c["status"] for c in result["conditions"]}
    assert status["max_abs_dp == 0"] == "fail" and status["k3_kl == 0"] == "fail"
    assert status["the judging process loaded no module of the code under test"] == "pass"
    assert result["inputs"][0]["workers"].startswith("confined"), result["inputs"][0]["workers"]


def _engine_then_trainer() -> tuple:
    """The fast contract's engine bits and its trainer's bits of the same tokens, each side
    asked in its own worker as C07 asks them."""
    common = {"subject": {"model": "qwen3", "contract": "fast", "checkpoint": None, "size": "cut"},
              "model_seed": 7, "device": "cpu"}
    engine = candidate.ask("rollout_bits", dict(common, workload={"num_sequences": 4, "new_tokens": 8,
                                                                  "arrival_spread": 2, "seed": 11}))
    sequences = as_sequences(engine["completions"])
    trainer = candidate.ask("trainer_bits", dict(common, sequences=sequences))
    return [c["bits"] for c in engine["completions"]], trainer["bits"]


def test_an_engine_worker_cannot_leave_its_bits_for_the_trainer_worker(tmp_path, monkeypatch):
    """Unconfined, the engine's worker writes its log-prob bits into a file the trainer's
    worker returns as its own, and the fast contract would agree with itself (the control);
    confined, the write is refused and the trainer's own bits differ."""
    assert confine.unavailable() is None, f"the judge's workers must run confined here: {confine.unavailable()}"
    drop = tmp_path / "drop.json"
    judge_workers_on(tree_with(tmp_path / "candidate", LEAVE_BITS_FOR_THE_TRAINER.format(drop=str(drop))),
                     tmp_path, monkeypatch)
    engine, trainer = _engine_then_trainer()
    assert not drop.exists() and engine != trainer, "confined, the trainer computed its own (fast) bits"
    with monkeypatch.context() as unconfined:
        unconfined.setattr(confine, "unavailable", lambda: "switched off for the control")
        engine, trainer = _engine_then_trainer()
    assert drop.exists() and engine == trainer, "the cheat works where nothing confines the workers"


def test_a_worker_that_fails_is_a_clear_error(monkeypatch):
    with pytest.raises(candidate.WorkerFailed, match="'rollout_bits' exited"):
        candidate.ask("rollout_bits", {"subject": {"model": "no-such-family", "contract": "consistent",
                                                   "checkpoint": None, "size": "cut"}, "model_seed": 0})


IMPORT_AND_LIST = """
import importlib.util, json, sys
found = {}
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("gates." + path.rsplit("/", 1)[-1][:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if getattr(module, "CANDIDATE_IN_WORKERS", False):
        found[path] = sorted(m for m in sys.modules if m.split(".")[0] == "kernels")
print(json.dumps(found))
"""


def _kernels_loaded_by(paths) -> dict:
    """{gate module path: the kernels modules loaded once it was imported}, for the modules
    that judge from workers, imported in order in one fresh process."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", IMPORT_AND_LIST, *map(str, paths)], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)


def test_every_worker_judged_gate_module_imports_no_candidate_code(tmp_path):
    """Imported as pytest imports it, a gate module that judges from workers loads no module of
    `kernels` (a helper it imports for a constant must not pull the engine in): checked here for
    every gate, since the condition in the gate itself runs only on the paths a device reaches
    (C05's on CUDA alone). The negative control: a gate module that imports gates.workload."""
    found = _kernels_loaded_by(sorted((ROOT / "gates").glob("test_c*.py")))
    assert len(found) == 11, sorted(found)
    assert {path: loaded for path, loaded in found.items() if loaded} == {}
    control = tmp_path / "test_c99_control.py"
    control.write_text("from gates.workload import Workload\nCANDIDATE_IN_WORKERS = True\n")
    assert _kernels_loaded_by([control])[str(control)], "the negative control loads no kernels module"


def test_what_describes_the_tree_is_asked_once_a_process(monkeypatch):
    """ask_once: one worker for the same procedure, arguments and judged tree; another
    argument or another judged tree (PYTHONPATH) asks again."""
    asked = []
    monkeypatch.setattr(candidate, "_ANSWERED", {})
    monkeypatch.setattr(candidate, "ask", lambda procedure, arguments: asked.append(arguments) or {"n": len(asked)})
    first = candidate.ask_once("sizes", {"model": "qwen3", "checkpoint": None})
    assert candidate.ask_once("sizes", {"checkpoint": None, "model": "qwen3"}) == first and len(asked) == 1
    assert candidate.ask_once("sizes", {"model": "nemotron", "checkpoint": None}) == {"n": 2}
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert candidate.ask_once("sizes", {"model": "qwen3", "checkpoint": None}) == {"n": 3}


SAY_THE_WAIT_POLICY = """
import os as _os, sys as _sys
_sys.exit("OMP_WAIT_POLICY=" + _os.environ.get("OMP_WAIT_POLICY", "unset"))
"""


@pytest.mark.parametrize("caller, together, worker", [
    (None, True, "PASSIVE"), ("ACTIVE", True, "ACTIVE"), (None, False, "unset"), ("PASSIVE", False, "PASSIVE")])
def test_workers_asked_together_wait_passively_unless_the_caller_says(tmp_path, monkeypatch, caller, together,
                                                                      worker):
    """Two workers at once, each spinning on its OpenMP pool, slow each other tenfold on two
    cores; a worker alone waiting passively is slower fourfold (a futex wake per small op). A
    policy the caller set is kept."""
    judge_workers_on(tree_with(tmp_path / "tree", SAY_THE_WAIT_POLICY), tmp_path, monkeypatch)
    if caller is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", caller)
    asked = ("trainer_bits", {"subject": {"model": "qwen3", "contract": "consistent", "checkpoint": None,
                                          "size": "cut"}, "model_seed": 0})
    with pytest.raises(candidate.WorkerFailed, match=f"OMP_WAIT_POLICY={worker}"):
        candidate.ask_together(asked, asked) if together else candidate.ask(*asked)
