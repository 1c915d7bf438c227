"""`harness run --target transformers --checkpoint DIR` (harness/stages/target_run.py): gates, diff
and locate on the stack, the stages that need our kernels skipped with the reason, a report
that says which properties it has and lacks, by how much, where and what to read; it renders
in headless Chromium; a resumed run skips what finished; bad options are clear errors."""
import json
import subprocess

import pytest

from harness.cli import EXIT_BAD_INPUT, EXIT_DIFFERENT, EXIT_OK, main
from tests.harness.test_report import CHROMIUM, CHROMIUM_FLAGS
from tests.tiny_checkpoints import save_tiny_qwen3


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return str(save_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"), tie=False)[0])


@pytest.fixture(scope="module")
def run_dir(checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("target-run") / "run"
    code = main(["run", "--target", "transformers", "--checkpoint", checkpoint, "--gates", "C4,C7", "--out", str(out)])
    gates = {p.stem: json.loads(p.read_text())["status"] for p in (out / "gates").glob("C*.json")}
    assert code == (EXIT_DIFFERENT if "fail" in gates.values() else EXIT_OK)
    return out


def test_the_run_judges_the_stack_and_skips_what_needs_our_kernels(run_dir):
    state = json.loads((run_dir / "run.json").read_text())
    assert state["target"] == "transformers" and [state["stages"][s]["status"] for s in ("gates", "diff")] == [
        "done", "done"]
    for stage in ("shrink", "agents", "profile"):
        assert state["stages"][stage] == {**state["stages"][stage], "status": "skipped"}
        assert "our kernels" in state["stages"][stage]["detail"]
    diff = json.loads((run_dir / "diff" / "target.json").read_text())
    assert diff["target"] == "transformers" and diff["num_tokens"] == 16 * 16 and len(diff["abs_dp"]) == 16 * 16
    assert json.loads((run_dir / "locate" / "locate.json").read_text())["status"] in ("divergent", "clean")


def test_the_report_says_what_the_stack_has_lacks_and_what_to_read(run_dir):
    report = (run_dir / "report.md").read_text()
    c07 = json.loads((run_dir / "gates" / "C07.json").read_text())["status"]
    print(report)  # recorded, not assumed
    row = next(line for line in report.splitlines() if line.startswith("| C07 |"))
    assert f"| {c07} |" in row and ("guides/norm-logprob-reductions.md" in row) == (c07 == "fail")
    assert "- C04: " in report and "does not offer" in report  # not judged, with the reason
    assert "**Has:**" in report and "**Lacks:**" in report and "max \\|dp\\|" in report


def test_the_report_renders_in_headless_chromium(run_dir, tmp_path):
    assert CHROMIUM.exists(), "headless Chromium is needed (apt-get install -y --no-install-recommends chromium)"
    dom = subprocess.run([str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          (run_dir / "report.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for element in ('id="verdict"', 'id="properties"', 'id="mismatch"', 'id="locate"', 'id="gate-C07"'):
        assert element in dom.stdout, element


def test_a_resumed_run_skips_what_finished(run_dir, checkpoint, capsys):
    main(["run", "--target", "transformers", "--checkpoint", checkpoint, "--gates", "C4,C7", "--out", str(run_dir)])
    printed = capsys.readouterr().out
    assert "[gates] done already (resumed)" in printed and "[locate]" in printed


def test_bad_options_for_a_target_are_clear_errors(checkpoint, capsys):
    assert main(["run", "--target", "transformers"]) == EXIT_BAD_INPUT
    assert "--checkpoint DIR" in capsys.readouterr().err
    assert main(["run", "--target", "transformers", "--checkpoint", checkpoint, "--agent", "anthropic"]) == (
        EXIT_BAD_INPUT)
    assert "the agents edit our kernels" in capsys.readouterr().err


def test_harness_report_re_renders_a_target_run_s_own_report(run_dir, capsys):
    (run_dir / "report.md").unlink()
    assert main(["report", str(run_dir)]) == EXIT_OK
    assert "judged by bitwise-align" in (run_dir / "report.md").read_text()
    assert str(run_dir / "report.html") in capsys.readouterr().out
