"""`harness run`: under a contract that fails a gate it goes gates -> diff -> locate -> shrink
-> profile -> report, writing each stage's raw files into the run directory; an interrupted
run keeps what it recorded and resumes (finished gates are not re-run); bad input is a clear
error."""
import json

import pytest

from harness.cli import EXIT_BAD_INPUT, EXIT_DIFFERENT, main
from harness.stages import gates as gates_stage
from harness.stages import locate as locate_stage
from harness.stages import profile as profile_stage


class Interrupted(BaseException):
    """Stands for Ctrl-C or a killed process: not an error the run may catch."""


ARGS = ["run", "--model", "qwen3", "--contract", "fast", "--gates", "C0,C7", "--pairs", "1"]


def test_interrupted_run_resumes_and_reports(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    real_locate = locate_stage.locate

    def interrupted(*args, **kwargs):
        raise Interrupted  # as if the person pressed Ctrl-C during locate

    monkeypatch.setattr(locate_stage, "locate", interrupted)
    with pytest.raises(Interrupted):
        main([*ARGS, "--out", str(out)])
    state = json.loads((out / "run.json").read_text())
    assert {k: v["status"] for k, v in state["stages"].items()} == {"gates": "done", "diff": "done",
                                                                    "locate": "running"}
    assert json.loads((out / "gates" / "C07.json").read_text())["status"] == "fail"
    gate_files = {p.name: p.stat().st_mtime_ns for p in (out / "gates").iterdir()}

    monkeypatch.setattr(locate_stage, "locate", real_locate)
    for field, value in (("num_sequences", 4), ("new_tokens", 4)):  # a short profile: the stage is what is tested
        monkeypatch.setitem(profile_stage.DEFAULT_WORKLOAD, field, value)
    monkeypatch.setattr(gates_stage, "run_gates", lambda selected, **kw: pytest.fail(f"re-ran {list(selected)}")
                        if selected else {})
    capsys.readouterr()
    assert main([*ARGS, "--out", str(out)]) == EXIT_DIFFERENT
    printed = capsys.readouterr().out
    assert "[gates] done already (resumed)" in printed and "report:" in printed
    assert {p.name: p.stat().st_mtime_ns for p in (out / "gates").iterdir()} == gate_files
    stages = json.loads((out / "run.json").read_text())["stages"]
    assert [stages[s]["status"] for s in ("locate", "shrink", "report")] == ["done", "done", "done"]
    assert stages["profile"]["status"] == "done", stages["profile"]  # against the repo's frozen CPU baseline
    located = json.loads((out / "locate" / "locate.json").read_text())
    assert located["status"] == "divergent" and located["layer"] in (None, 0)
    repro = json.loads(next((out / "repros").glob("*/repro.json")).read_text())
    assert repro["repro_fails"] and repro["cut"]["confirmed"]
    for name in ("diff/consistent.json", "diff/fast.json", "report.md", "report.html"):
        assert (out / name).exists(), name
    assert len(json.loads((out / "diff" / "fast.json").read_text())["abs_dp"]) == 16 * 16


def test_bad_input_is_a_clear_error(tmp_path, capsys, monkeypatch):
    assert main(["run", "--model", "qwen3", "--agent", "gpt", "--out", str(tmp_path / "a")]) == EXIT_BAD_INPUT
    assert "unknown agent backend 'gpt'" in capsys.readouterr().err
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert main(["run", "--model", "qwen3", "--agent", "anthropic", "--out", str(tmp_path / "k")]) == EXIT_BAD_INPUT
    assert "set ANTHROPIC_API_KEY" in capsys.readouterr().err and not (tmp_path / "k").exists()
    assert main(["run", "--model", "llama", "--out", str(tmp_path / "b")]) == EXIT_BAD_INPUT
    assert "unknown model 'llama'" in capsys.readouterr().err
    assert main(["run", "--model", "qwen3", "--gates", "C42", "--out", str(tmp_path / "c")]) == EXIT_BAD_INPUT
    assert "unknown gate 'C42'" in capsys.readouterr().err
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "run.json").write_text(json.dumps({"model": "nemotron", "contract": "consistent",
                                                         "device": "cpu", "agent": "none", "gates": ["C00"],
                                                         "stages": {}}))
    assert main(["run", "--model", "qwen3", "--gates", "C0", "--out", str(tmp_path / "d")]) == EXIT_BAD_INPUT
    assert "this run was started with" in capsys.readouterr().err


def test_out_that_is_a_file_is_bad_input_before_any_stage(tmp_path, capsys):
    target = tmp_path / "a-file"
    target.write_text("not a run directory")
    for verb in (["run", "--model", "qwen3"], ["gates", "--model", "qwen3", "--only", "C7"]):
        assert main([*verb, "--out", str(target)]) == EXIT_BAD_INPUT
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is a file, not a directory" in err, err


def test_ctrl_c_ends_with_one_line_and_a_resumable_stage(tmp_path, monkeypatch, capsys):
    from harness.stages import run as run_stage

    def pressed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_stage, "_diff", pressed)
    out = tmp_path / "run"
    assert main(["run", "--model", "qwen3", "--gates", "C0", "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "interrupted" in err and f"--out {out}" in err, err
    stages = json.loads((out / "run.json").read_text())["stages"]
    assert stages["gates"]["status"] == "done" and stages["diff"]["status"] == "interrupted"


def test_resume_refuses_a_moved_head_unless_asked(tmp_path):
    from harness.stages.run_state import RunState
    asked = {"model": "qwen3", "contract": "consistent", "device": "cpu", "agent": "none", "gates": ["C00"]}
    (tmp_path / "run.json").write_text(json.dumps({**asked, "commit": "0" * 40, "stages": {}}))
    with pytest.raises(ValueError, match="this run judged commit 000000000000, HEAD is now"):
        RunState(tmp_path, asked)
    state = RunState(tmp_path, asked, allow_new_commit=True)
    assert state.data["commit"] == "0" * 40 and len(state.data["resumed_on_commits"]) == 1
    assert json.loads((tmp_path / "run.json").read_text())["resumed_on_commits"] == state.data["resumed_on_commits"]
