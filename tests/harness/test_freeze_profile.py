"""`harness freeze-baseline`, the frozen-baseline checks of gates C00 and C10, and `harness
profile`, each in a throwaway clone of this repository (they tag, commit and add worktrees).

The clone holds the last commit plus this work's gate-side files, committed there; the
harness under test is this tree's, run in-process with the clone as the working directory.
"""
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from gates import test_c10_performance as c10
from gates.baseline import NO_BASELINE, no_baseline, read_frozen, verify_frozen
from gates.conftest import GateRecord
from gates.git_objects import export_commit
from gates.timed_worker import drive
from gates.workload import seeded_weights
from harness import workspace
from harness.cli import EXIT_BAD_INPUT, EXIT_OK, main
from harness.profile_worker import OUTSIDE, DoorClock
from kernels.models.config import load_model_config
from kernels.models.registry import config_name

ROOT = Path(__file__).resolve().parents[2]
FAST_SOURCE = "kernels/ops/padding.py"  # an op module the fast path runs, at this path in every layout
# baseline-cuda-v5's commit, from its record (3b71de3:baseline/frozen-cuda.json)
BASELINE_CUDA_V5 = "e3b81dc7deba14ad4828ad39668fecd0e7859d6a"


def git(repo, *args) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def clone(tmp_path, monkeypatch):
    """A clone of this repository as if no baseline had ever been frozen (no tags, no record)."""
    repo = tmp_path / "repo"
    git(tmp_path, "clone", "-q", str(ROOT), str(repo))
    git(repo, "config", "user.email", "test@example.com")
    git(repo, "config", "user.name", "test")
    for tag in git(repo, "tag").split():
        git(repo, "tag", "-d", tag)
    records = [str(path.relative_to(repo)) for path in (repo / "baseline").glob("frozen*.json")]
    if records:  # the CPU record and any device target's
        git(repo, "rm", "-q", *records)
        git(repo, "commit", "-q", "-m", "start from no frozen baseline")
    monkeypatch.chdir(repo)
    return repo


def edit_fast_source(repo) -> None:
    with open(repo / FAST_SOURCE, "a") as source:
        source.write("# an edit after the freeze\n")


def test_freeze_refuses_a_dirty_tree(clone, capsys):
    edit_fast_source(clone)
    (clone / "kernels" / "scratch.py").write_text("")
    assert main(["freeze-baseline", "--tag", "b1"]) == EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert "uncommitted changes" in error and FAST_SOURCE in error and "kernels/scratch.py" in error
    assert git(clone, "tag") == "" and read_frozen(clone) is None


def test_freeze_tags_head_commits_the_record_and_c00_verifies_it(clone, capsys):
    head = git(clone, "rev-parse", "HEAD")
    assert main(["freeze-baseline", "--tag", "b1"]) == EXIT_OK
    record = read_frozen(clone)
    assert record["tag"] == "b1" and record["commit"] == head and git(clone, "rev-parse", "b1") == head
    assert record["hash_of"] == "numerical_policy of the fast contract" and len(record["content_hash"]) == 64
    assert git(clone, "log", "-1", "--format=%s") == "baseline: freeze b1 as the cpu baseline"
    assert git(clone, "show", "--name-only", "--format=", "HEAD") == "baseline/frozen.json"
    assert git(clone, "status", "--porcelain") == ""
    assert "froze b1" in capsys.readouterr().out
    assert main(["freeze-baseline", "--tag", "b1"]) == EXIT_BAD_INPUT  # a tag is frozen once
    assert "already exists" in capsys.readouterr().err

    out = clone / "gate-out"
    subprocess.run([sys.executable, "-m", "pytest", "gates/test_c00_apparatus.py", "-q", "-p",
                    "no:cacheprovider", "--rootdir", str(clone), "--model", "qwen3", "--gate-out",
                    str(out)], cwd=clone, capture_output=True)
    conditions = {c["name"]: c for c in json.loads((out / "C00.json").read_text())["conditions"]}
    frozen = conditions["baseline frozen and its hash verified"]
    assert frozen["status"] == "pass" and frozen["recomputed_content_hash"] == record["content_hash"]


def test_a_record_moved_to_a_commit_with_other_engine_code_fails(clone):
    """The policy hash leaves out the engine's bookkeeping (kernels/engine/scheduler.py is not a
    policy source): a record moved to a commit that changed only such a file keeps a matching
    content hash, and files_hash (every file C10 runs) is what refuses it."""
    assert main(["freeze-baseline", "--tag", "b1"]) == EXIT_OK
    record = read_frozen(clone)
    assert verify_frozen(clone)[0] == [] and record["files_hash"] == verify_frozen(clone)[1]["recomputed_files_hash"]
    with open(clone / "kernels" / "engine" / "scheduler.py", "a") as source:
        source.write("SLOWER_BY_DESIGN = True  # what runs, not what is hashed as policy\n")
    git(clone, "commit", "-qam", "engine-only change")
    moved = dict(record, commit=git(clone, "rev-parse", "HEAD"))
    (clone / "baseline" / "frozen.json").write_text(json.dumps(moved))
    git(clone, "tag", "-d", "b1")  # tags need not travel with a clone: the hashes must hold alone
    problems, figures = verify_frozen(clone)
    assert figures["recomputed_content_hash"] == record["content_hash"]  # the policy hash cannot see it
    assert len(problems) == 1 and "files_hash" in problems[0], problems
    (clone / "baseline" / "frozen.json").write_text(json.dumps({k: v for k, v in moved.items() if k != "files_hash"}))
    problems, figures = verify_frozen(clone)  # an older record: said, not silently passed
    assert problems == [] and figures["files_hash"].startswith("not recorded")


def test_each_device_target_has_its_own_record(clone, capsys):
    """`--device cuda` freezes a second record (C00 and C10 on CUDA read it), leaving the CPU
    one alone; each target's verification reads its own file."""
    assert verify_frozen(clone, "cuda")[0] == [no_baseline("cuda")] and "--device cuda" in no_baseline("cuda")
    assert main(["freeze-baseline", "--tag", "gpu1", "--device", "cuda"]) == EXIT_OK
    record = read_frozen(clone, "cuda")
    assert record["device"] == "cuda" and record["tag"] == "gpu1" and read_frozen(clone) is None
    assert git(clone, "show", "--name-only", "--format=", "HEAD") == "baseline/frozen-cuda.json"
    assert verify_frozen(clone, "cuda") == ([], verify_frozen(clone, "cuda")[1])
    assert verify_frozen(clone)[0] == [NO_BASELINE]
    with pytest.raises(SystemExit):  # argparse refuses a device target it does not know
        main(["freeze-baseline", "--tag", "gpu2", "--device", "tpu"])
    assert "invalid choice: 'tpu'" in capsys.readouterr().err


def test_c10_times_the_full_width_model_on_a_gpu(monkeypatch):
    """C10's plan: the cut on the CPU; on CUDA qwen3-1.7b and Nemotron's wide cut, both with
    decode graphs, room for all 64 sequences; and a missing CUDA record fails the gate naming
    the CUDA freeze command."""
    assert c10.plan("cpu", 5, {"config": "qwen3-cut", "graphs_refused": ""}) == {"config": "qwen3-cut", "workload": {
        "num_sequences": 16, "new_tokens": 24, "arrival_spread": 4, "seed": 5}}
    sizes = {model: c10.subject_size(model, "cuda") for model in ("qwen3", "nemotron")}
    assert (config_name("qwen3", sizes["qwen3"]), config_name("nemotron", sizes["nemotron"])) == \
        ("qwen3-1.7b", "nemotron-wide-cut") and c10.subject_size("qwen3", "cpu") == "cut"
    qwen3 = c10.plan("cuda", 5, {"config": "qwen3-1.7b", "graphs_refused": ""})
    refused = c10.plan("cuda", 5, {"config": "nemotron-wide-cut", "graphs_refused": "no graphs here"})
    assert (qwen3["config"], qwen3["engine"], qwen3["device"]) == ("qwen3-1.7b", {"cuda_graphs": True}, "cuda")
    assert (refused["config"], refused["engine"]) == ("nemotron-wide-cut", {"cuda_graphs": False})
    assert qwen3["shape"]["max_running"] >= qwen3["workload"]["num_sequences"]
    monkeypatch.setattr(c10.device, "target", lambda: "cuda")
    monkeypatch.setattr(c10, "read_frozen", lambda **_: None)
    record = GateRecord("C10", "qwen3", "consistent")
    with pytest.raises(AssertionError, match="condition"):
        c10.test_throughput_against_the_frozen_baseline(record)
    assert [(c["status"], c.get("problem")) for c in record.conditions] == [("fail", no_baseline("cuda"))]


def test_c10_replays_decode_graphs_only_where_the_frozen_tree_does_too(tmp_path):
    """Each tree is asked in its own process: baseline-cuda-v5 predates Nemotron's decode
    graphs and refuses them, the CPU baseline predates kernels/engine/graphs.py, this tree
    replays them (the gate then runs both sides eagerly where the baseline refuses).

    The trees are named by commit, as the frozen records name them: tags do not travel with a
    clone of main (CI's clone has none)."""
    v5 = export_commit(BASELINE_CUDA_V5, tmp_path / "v5", ROOT, paths=("kernels",))
    assert "Mamba layers keep per-sequence" in c10.graphs_refused(v5, "nemotron-wide-cut")
    cpu = export_commit(read_frozen(ROOT)["commit"], tmp_path / "cpu", ROOT, paths=("kernels",))
    assert c10.graphs_refused(cpu, "qwen3-1.7b") == "no kernels/engine/graphs.py"
    assert c10.graphs_refused(ROOT, "nemotron-wide-cut") == ""


def test_verification_fails_when_the_record_does_not_match_its_commit(clone):
    assert verify_frozen(clone)[0] == [NO_BASELINE]
    assert main(["freeze-baseline", "--tag", "b1"]) == EXIT_OK
    record = read_frozen(clone)
    path = clone / "baseline" / "frozen.json"

    path.write_text(json.dumps({**record, "content_hash": "0" * 64}))
    problems, figures = verify_frozen(clone)
    assert len(problems) == 1 and "not the recorded" in problems[0]
    assert figures["recomputed_content_hash"] == record["content_hash"]

    git(clone, "checkout", "--", "baseline/frozen.json")
    edit_fast_source(clone)
    git(clone, "commit", "-qam", "the fast path changes after the freeze")
    path.write_text(json.dumps({**record, "commit": git(clone, "rev-parse", "HEAD")}))
    problems, _ = verify_frozen(clone)
    assert any("not the recorded" in p for p in problems) and any("tag b1 points at" in p for p in problems)

    path.write_text(json.dumps({**record, "commit": "f" * 40}))
    assert "does not exist" in verify_frozen(clone)[0][0]


def test_c10_fails_without_a_frozen_baseline(monkeypatch):
    monkeypatch.setattr(c10, "read_frozen", lambda **_: None)
    record = GateRecord("C10", "qwen3", "consistent")
    with pytest.raises(AssertionError, match="condition"):
        c10.test_throughput_against_the_frozen_baseline(record)
    assert [(c["status"], c.get("problem")) for c in record.conditions] == [("fail", NO_BASELINE)]


def test_c10_times_the_frozen_commit_not_the_working_tree(clone):
    """The baseline sample runs in the exported frozen tree: its kernels, not the caller's."""
    with tempfile.TemporaryDirectory() as folder:
        tree = export_commit(git_head(clone), folder, clone, paths=("kernels", "gates"))
        weights = Path(folder) / "weights.pt"
        torch.save(seeded_weights(load_model_config("qwen3-cut")), weights)
        asked = {"config": "qwen3-cut", "contract": "fast", "weights_file": str(weights),
                 "workload": {"num_sequences": 2, "new_tokens": 3, "arrival_spread": 1, "seed": 1}}
        assert drive(tree, asked, [2])["runs"][0]["wall_s"] > 0
        shutil.rmtree(tree / "kernels")  # a tree without its own kernels is refused
        with pytest.raises(RuntimeError):
            drive(tree, asked, [2])


def git_head(repo) -> str:
    return git(repo, "rev-parse", "HEAD")


def test_profile_without_a_frozen_baseline_is_a_clear_error(clone, capsys):
    assert main(["profile", "--model", "qwen3", "--out", str(clone / "runs" / "p")]) == EXIT_BAD_INPUT
    assert "no frozen baseline: run harness freeze-baseline" in capsys.readouterr().err
    assert not (clone / ".worktrees").exists()


def test_profile_interleaves_the_frozen_baseline_with_the_current_tree(clone, capsys):
    assert main(["freeze-baseline", "--tag", "b1"]) == EXIT_OK
    frozen = read_frozen(clone)
    edit_fast_source(clone)  # the fast path moves on: profile must still time the frozen one
    git(clone, "commit", "-qam", "the fast path changes after the freeze")
    out = clone / "runs" / "p"
    assert main(["profile", "--model", "qwen3", "--pairs", "2", "--num-sequences", "4",
                 "--new-tokens", "3", "--out", str(out)]) == EXIT_OK
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [(s["pair"], s["side"]) for s in samples] == [(0, "baseline"), (0, "consistent"),
                                                         (1, "baseline"), (1, "consistent")]
    assert all(s["num_tokens"] == 12 and s["rollout_tokens_per_s"] > 0 and s["train_step_s"] > 0 for s in samples)
    document = json.loads((out / "profile.json").read_text())
    throughput = document["rollout_tokens_per_s"]
    assert throughput["median_baseline"] == statistics.median(s["rollout_tokens_per_s"] for s in samples[::2])
    pairs = [c["rollout_tokens_per_s"] / b["rollout_tokens_per_s"] for b, c in zip(samples[::2], samples[1::2])]
    assert throughput["pair_ratios"] == pairs and throughput["ratio"] == statistics.median(pairs)
    assert throughput["noise"] == [min(pairs), max(pairs)]  # 2 pairs: the interval is their range
    for s in samples:  # CPU time of the worker (what C10 times on the CPU), wall time beside it
        assert s["clock"] == "process CPU time" and s["rollout_wall_s"] > 0 and s["train_step_wall_s"] > 0
        assert s["rollout_tokens_per_s"] == s["num_tokens"] / s["rollout_s"]
    steps = document["train_step_s"]
    step_pairs = [b["train_step_s"] / c["train_step_s"] for b, c in zip(samples[::2], samples[1::2])]
    assert steps["ratio"] == statistics.median(step_pairs)
    assert document["baseline"]["ref"] == "b1" and document["baseline"]["content_hash"] == frozen["content_hash"]
    assert document["commit"] == git(clone, "rev-parse", "HEAD") and document["environment"]["torch"]
    regions = document["regions"]
    assert {"attention", "lm_head", "sampler"} <= {r["region"] for r in regions}
    assert [r["extra_ms"] for r in regions] == sorted((r["extra_ms"] for r in regions), reverse=True)
    assert "rollout tokens/s" in capsys.readouterr().out
    assert git(clone, "status", "--porcelain") == ""  # the worktree is git-ignored


def test_profile_environments_must_agree_on_what_both_report():
    """A frozen commit older than a fingerprint field (comm_transport) still compares on the
    rest; a differing or unreported fair field refuses the comparison, naming it."""
    from harness.stages.profile import FAIR_ENVIRONMENT, environment_differences
    current = {key: f"{key}-value" for key in FAIR_ENVIRONMENT} | {"comm_backend": "none", "comm_transport": "none"}
    older = {key: value for key, value in current.items() if key != "comm_transport"}
    assert environment_differences(older, current) == []
    assert environment_differences(older | {"num_threads": 1}, current) == ["num_threads: 1 vs 'num_threads-value'"]
    assert (environment_differences({k: v for k, v in older.items() if k != "torch"}, current)
            == ["torch (not reported)"])


def test_worktree_is_reused_and_must_stay_clean(clone):
    repo = workspace.open_repo(clone)
    first = git(clone, "rev-parse", "HEAD~1")
    path = workspace.worktree_at(repo, first, clone / ".worktrees" / "w")
    assert git(path, "rev-parse", "HEAD") == first
    assert (workspace.worktree_at(repo, "HEAD", path) == path
            and git(path, "rev-parse", "HEAD") == git(clone, "rev-parse", "HEAD"))
    (path / FAST_SOURCE).write_text("")
    with pytest.raises(ValueError, match="uncommitted changes"):
        workspace.worktree_at(repo, first, path)


def test_region_time_is_each_door_s_own_time_less_the_doors_it_calls():
    ticks = iter([0, 10, 50, 80, 100, 120])  # mlp 0..80 holds mlp_act 10..50; mlp_act again 100..120
    clock = DoorClock(clock=lambda: next(ticks))

    def door(dispatch, region, case, layer, inner=None):
        return inner() if inner else None

    timed = clock.wrap(door)
    timed(None, "mlp", "trainer_fwd", 0, inner=lambda: timed(None, "mlp_act", "trainer_fwd", 0))
    assert dict(clock.totals_ns) == {"mlp": 40, "mlp_act": 40}
    timed(None, "mlp_act", "trainer_fwd", 0)
    assert clock.ms_by_region(150) == {"mlp": 40 / 1e6, "mlp_act": 60 / 1e6, OUTSIDE: 50 / 1e6}
