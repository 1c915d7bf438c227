"""C10 against cheats in the candidate's kernels: a patched clock, work handed to a child
process, outputs replayed from the warm run, the fast path taken where it is timed, a write
into the baseline's Triton cache or tree. The judge times its workers from outside (gates/timed_worker.py:
CPU time over the worker's whole process tree), confines them, draws each run's seed only at
GO, and has the trainer score what the engine produced in its own process; each test plants
one cheat and shows what catches it. And the record beside the verdict: each timed run names
what it compiled inside the clock."""
import json
import shutil

import pytest
import torch
import yaml

from gates import confine
from gates.baseline import ROOT
from gates.inputs import fresh_seed
from gates.test_c10_performance import trainer_mismatches
from gates.timed_worker import drive
from gates.workload import seeded_weights
from harness.cli import main
from harness.exit_codes import EXIT_DIFFERENT
from kernels.contract.contract import CONTRACT_DIR
from kernels.models.config import load_model_config

SLOW_CLOCKS = """
import time as _time
_time.perf_counter = lambda _clock=_time.perf_counter: _clock() / 1000
_time.process_time = lambda _clock=_time.process_time: _clock() / 1000
"""
REPLAY_THE_WARM_RUN = """
from kernels.engine import engine as _engine
_generate = _engine.Engine.generate
def _replay(self, requests, _memo=[]):
    if not _memo:
        _memo.append(_generate(self, requests))
    return _memo[0]
_engine.Engine.generate = _replay
"""


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """A small CPU plan on qwen3's cut, its seeded weights saved once."""
    folder = tmp_path_factory.mktemp("c10-cheats")
    weights = folder / "weights.pt"
    torch.save(seeded_weights(load_model_config("qwen3-cut")), weights)
    return {"config": "qwen3-cut", "contract": "consistent", "weights_file": str(weights),
            "workload": {"num_sequences": 4, "new_tokens": 6, "arrival_spread": 2, "seed": fresh_seed()}}


def _tree_with(tmp_path, cheat: str):
    """A candidate tree: this repository's kernels with `cheat` run at their import."""
    tree = tmp_path / "candidate"
    shutil.copytree(ROOT / "kernels", tree / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "gates").symlink_to(ROOT / "gates", target_is_directory=True)
    init = tree / "kernels" / "__init__.py"
    init.write_text(init.read_text() + cheat)
    return tree


def test_a_patched_clock_does_not_move_what_the_judge_measures(plan, tmp_path):
    """The worker's own clocks run 1000x slow; the judge's figures are its own: the cheat's
    CPU time per run is within 3x of the honest worker's, the worker's report is not."""
    seeds = [fresh_seed(), fresh_seed()]
    honest = drive(ROOT, plan, seeds)
    cheat = drive(_tree_with(tmp_path, SLOW_CLOCKS), plan, seeds)
    reported = sum(run["cpu_s"] for run in cheat["worker_reported"])
    judged = sum(run["cpu_s"] for run in cheat["runs"])
    assert reported * 100 < judged, f"the cheat did not take: worker reports {reported} s, judge {judged} s"
    assert 1 / 3 < judged / sum(run["cpu_s"] for run in honest["runs"]) < 3, (cheat["runs"], honest["runs"])
    assert [r["digest"] for r in cheat["runs"]] == [r["digest"] for r in honest["runs"]]


WORK_IN_A_CHILD = """
import os as _os, pickle as _pickle
from kernels.engine import engine as _engine
_generate = _engine.Engine.generate
def _in_a_child(self, requests):
    read, write = _os.pipe()
    if _os.fork() == 0:  # the child generates; the worker's own threads stay idle
        _os.close(read)
        with _os.fdopen(write, "wb") as out:
            _pickle.dump(_generate(self, requests), out)
        _os._exit(0)
    _os.close(write)
    with _os.fdopen(read, "rb") as source:
        completions = _pickle.load(source)
    _os.wait()
    return completions
_engine.Engine.generate = _in_a_child
"""
POISON_THE_BASELINE_CACHE = """
import os as _os, pathlib as _pathlib
_own = _pathlib.Path(_os.environ["TRITON_CACHE_DIR"])
for _target in (_own.with_name(_own.name + "-c10-baseline"), _pathlib.Path(_os.environ["BASELINE_TREE"])):
    try:
        (_target / "poisoned").write_text("a slow kernel for the baseline")
    except OSError:
        pass
"""


def test_work_handed_to_a_child_process_is_timed(plan, tmp_path):
    """A worker whose engine generates in a forked child: its own threads idle, the child
    busy. The judge's CPU time counts every process under the worker (the reaped child
    included): within 3x of the honest worker's, the same outputs."""
    seeds = [fresh_seed(), fresh_seed()]
    honest = drive(ROOT, plan, seeds)
    cheat = drive(_tree_with(tmp_path, WORK_IN_A_CHILD), plan, seeds)
    assert [r["digest"] for r in cheat["runs"]] == [r["digest"] for r in honest["runs"]]
    judged, fair = (sum(run["cpu_s"] for run in answer["runs"]) for answer in (cheat, honest))
    assert 1 / 3 < judged / fair < 3, (cheat["runs"], honest["runs"])


@pytest.mark.skipif(confine.unavailable() is not None, reason="confinement unavailable here")
def test_a_candidate_worker_cannot_write_the_baseline_cache_or_tree(plan, tmp_path, monkeypatch):
    """The timed candidate worker writes only its scratch folder and its own Triton cache: the
    baseline's cache and its exported tree stay as they were."""
    cache = tmp_path / "triton" / "cache"
    baseline_cache, baseline_tree = cache.with_name("cache-c10-baseline"), tmp_path / "baseline"
    for folder in (cache, baseline_cache, baseline_tree):
        folder.mkdir(parents=True)
    monkeypatch.setenv("BASELINE_TREE", str(baseline_tree))
    drive(_tree_with(tmp_path, POISON_THE_BASELINE_CACHE), plan, [fresh_seed()], triton_cache=cache)
    assert not (baseline_cache / "poisoned").exists() and not (baseline_tree / "poisoned").exists()
    monkeypatch.setattr(confine, "unavailable", lambda: "turned off to show the plant writes where it can")
    drive(_tree_with(tmp_path / "again", POISON_THE_BASELINE_CACHE), plan, [fresh_seed()], triton_cache=cache)
    assert (baseline_cache / "poisoned").exists()


def test_outputs_replayed_from_the_warm_run_fail_the_trainers_scores(plan, tmp_path):
    """An engine that answers every run with the warm run's completions answers instantly and
    agrees with itself, reference worker included; the trainer, scoring those tokens after
    the seed's own prompts, gives other bits (an honest worker's agree with it)."""
    seeds = [fresh_seed(), fresh_seed()]
    cheat = drive(_tree_with(tmp_path, REPLAY_THE_WARM_RUN), plan, seeds, bits_of_first=True)
    assert cheat["runs"][0]["digest"] == cheat["runs"][1]["digest"], "the replay did not take"
    assert trainer_mismatches(plan, seeds[0], cheat["bits"]) > 0
    honest = drive(ROOT, plan, seeds[:1], bits_of_first=True)
    assert trainer_mismatches(plan, seeds[0], honest["bits"]) == 0


def test_the_fast_path_taken_in_timed_workers_fails_the_gate(tmp_path, monkeypatch):
    """A contract whose engine log-prob turns engine-style in C10's worker processes only:
    timed and reference outputs agree, the throughput passes, and the gate fails on the
    trainer's scores."""
    document = yaml.safe_load((CONTRACT_DIR / "consistent.yaml").read_text())
    document["name"] = "consistent-planted-fast-in-a-worker"
    for case in ("engine_prefill", "engine_decode", "engine_graph"):
        document["regions"]["logprob"][case] = {"impl": "logprob.planted_fast_in_a_worker"}
    contract = tmp_path / "switching.yaml"
    contract.write_text(yaml.safe_dump(document))
    monkeypatch.setenv("BITWISE_C10_PAIRS", "1")
    assert main(["gates", "--model", "qwen3", "--only", "C10", "--contract", str(contract),
                 "--out", str(tmp_path / "out")]) == EXIT_DIFFERENT
    conditions = {c["name"]: c for c in json.loads((tmp_path / "out" / "C10.json").read_text())["conditions"]}
    trainer = next(c for name, c in conditions.items() if name.startswith("the trainer scores"))
    assert trainer["status"] == "fail" and trainer["differing_logprobs"] > 0, trainer
    timed = next(c for name, c in conditions.items() if name.startswith("every timed candidate run"))
    assert timed["status"] == "pass", "the switched path agrees with itself: only the trainer can see it"


COMPILES_EACH_RUN = """
import os as _os, pathlib as _pathlib
from kernels.engine import engine as _engine
_generate = _engine.Engine.generate
def _compiling(self, requests, _count=[0]):
    _count[0] += 1  # what a Triton compile leaves: an entry with the kernel's metadata
    entry = _pathlib.Path(_os.environ["TRITON_CACHE_DIR"]) / f"entry{_count[0]}"
    entry.mkdir(parents=True)
    (entry / "_planted_kernel.json").write_text("{}")
    (entry / "__grp___planted_kernel.json").write_text("{}")
    from triton import knobs as _knobs  # what Triton tells its hook before it compiles
    _knobs.runtime.jit_cache_hook(repr=f"_planted_kernel[num_warps=4](rows: i32, width: {_count[0]})")
    return _generate(self, requests)
_engine.Engine.generate = _compiling
"""


def test_every_run_names_what_it_compiled_inside_the_clock(plan, tmp_path, monkeypatch):
    """The record that tells a slow run's compile from noise: each timed run lists the
    kernels that entered Triton's cache during it and the specializations Triton's hook saw
    (which argument's value made a new one); the warm runs' are not counted."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    seeds = [fresh_seed(), fresh_seed()]
    compiling = drive(_tree_with(tmp_path, COMPILES_EACH_RUN), plan, seeds)["worker_reported"]
    warm_runs = 1 + len(plan.get("warm_seeds", ()))
    assert [run["compiled"] for run in compiling] == [
        {"graphs": 0, "triton_kernels": ["_planted_kernel"], "cuda_mallocs": 0,
         "specializations": [f"_planted_kernel[num_warps=4](rows: i32, width: {warm_runs + n})"]} for n in (1, 2)]
    clean = drive(ROOT, plan, seeds)["worker_reported"]
    assert [run["compiled"] for run in clean] == [
        {"graphs": 0, "triton_kernels": [], "specializations": [], "cuda_mallocs": 0}] * 2
