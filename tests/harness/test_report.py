"""`harness report`: renders report.md and report.html from a run directory built from real
stage output (gates C00 and C07, diff under both contracts, locate under the fast contract)
plus small synthetic C09 and profile files (too slow to produce here); shows every gate and
plot with figures read from the files, links every raw file, says "not run" or "failed:
<detail>" for missing parts, re-renders identically, and lays out in headless Chromium with
the verdict and one status per gate on the first screen (1280 x 900) and the per-condition
detail folded below it."""
import inspect
import json
import math
import re
import shutil
import struct
import subprocess
from html import unescape
from pathlib import Path

import pytest

from gates.workload import Workload, rollout, score, seeded_weights
from harness.cli import EXIT_BAD_INPUT, EXIT_OK, main
from harness.stages.diff import run_diff
from harness.stages.report import render
from kernels.contract import load_contract
from kernels.models.config import load_model_config
from kernels.models.registry import config_name

GATES = [f"C{number:02d}" for number in range(11)]
DIFF_WORKLOAD = Workload(num_sequences=6, new_tokens=8)
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SYNTHETIC = "synthetic test input written by tests/harness/test_report.py"
SYNTHETIC_C09_PER_STEP = [0.0004, 0.0011, 0.0007, 0.0013, 0.0002, 0.0009]
SYNTHETIC_THROUGHPUT = {"baseline": [181.0, 176.5, 183.25], "consistent": [172.5, 170.0, 174.75],
                        "median_baseline": 181.0, "median_consistent": 172.5, "ratio": 0.953}


def _abs_dp_by_hand(contract_name: str) -> list:
    """Per-token |dp| for the diff workload, for a run_diff that does not return `abs_dp`."""
    config = load_model_config(config_name("qwen3", "cut"))
    contract, weights = load_contract(contract_name), seeded_weights(config)
    completions, _ = rollout(config, contract, weights, DIFF_WORKLOAD)
    trainer = score(config, contract, weights, completions)
    engine = [float(v) for c in completions for v in c.logprob_tensor.reshape(-1)]
    trainer = [float(v) for sequence in trainer for v in sequence.reshape(-1)]
    return [abs(math.exp(e) - math.exp(t)) for e, t in zip(engine, trainer, strict=True)]


def _write_diff(run: Path, contract_name: str) -> None:
    per_token = "per_token" in inspect.signature(run_diff).parameters
    result = run_diff("qwen3", "cut", contract_name, DIFF_WORKLOAD, **({"per_token": True} if per_token else {}))
    if "abs_dp" not in result:
        result["abs_dp"] = _abs_dp_by_hand(contract_name)
    (run / "diff").mkdir(parents=True, exist_ok=True)
    (run / "diff" / f"{contract_name}.json").write_text(json.dumps(result))


def _write_synthetic_c09(run: Path) -> None:
    failing = {"name": "engine == trainer log-probs, bitwise, every step", "status": "fail",
               "per_step_max_abs_dp": SYNTHETIC_C09_PER_STEP, "max_abs_dp": max(SYNTHETIC_C09_PER_STEP)}
    passing = {"name": "engine == update log-probs, bitwise, every step", "status": "pass",
               "per_step_max_abs_dp": [0.0] * len(SYNTHETIC_C09_PER_STEP), "max_abs_dp": 0.0}
    (run / "gates" / "C09.json").write_text(json.dumps(
        {"gate": "C09", "status": "fail", "model": "qwen3", "contract": "fast", "commit": "synthetic",
         "environment": {}, "conditions": [failing, passing], "inputs": [{"note": SYNTHETIC}],
         "not_applicable": []}))


def _write_synthetic_profile(run: Path) -> None:
    (run / "profile").mkdir(parents=True, exist_ok=True)
    (run / "profile" / "profile.json").write_text(json.dumps(
        {"note": SYNTHETIC, "commit": "synthetic", "environment": {"device": "synthetic-cpu"}, "model": "qwen3",
         "workload": {"num_sequences": 16}, "rollout_tokens_per_s": SYNTHETIC_THROUGHPUT,
         "baseline": {"ref": "baseline-v1", "commit": "synthetic", "content_hash": "0" * 64, "worktree": "wt"},
         "train_step_s": {"baseline": [1.5], "consistent": [1.625], "median_baseline": 1.5,
                          "median_consistent": 1.625, "ratio": 0.923},
         "regions": [{"region": "attention", "baseline_ms": 9.5, "consistent_ms": 12.25, "extra_ms": 2.75}]}))
    (run / "profile" / "samples.jsonl").write_text(json.dumps({"note": SYNTHETIC}) + "\n")


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A run directory; reports are re-rendered by each test, the data files are not touched."""
    run = tmp_path_factory.mktemp("report") / "run"
    main(["gates", "--model", "qwen3", "--only", "C0,C7", "--out", str(run / "gates")])
    for contract_name in ("consistent", "fast"):
        _write_diff(run, contract_name)
    main(["locate", "--model", "qwen3", "--contract", "fast", "--out", str(run / "locate")])
    _write_synthetic_c09(run)
    _write_synthetic_profile(run)
    return run


@pytest.fixture(scope="module")
def rendered(real_run) -> dict:
    assert main(["report", str(real_run)]) == EXIT_OK
    return {name: (real_run / name).read_text() for name in ("report.md", "report.html")}


def test_report_shows_every_gate_with_its_status_and_figures_from_the_files(real_run, rendered):
    markdown, html = rendered["report.md"], rendered["report.html"]
    for gate in GATES:
        result_path = real_run / "gates" / f"{gate}.json"
        status = json.loads(result_path.read_text())["status"] if result_path.exists() else "not run"
        assert f'id="gate-{gate}"' in html and f"| **{gate}** |" in markdown, gate
        row = next(line for line in markdown.splitlines() if line.startswith(f"| **{gate}** |"))
        assert ("**FAIL**" if status == "fail" else status) in row, (gate, row)
    assert '<details class="gate fail" id="gate-C09" open>' in html, "a failed gate stands out, unfolded"
    assert '<details class="gate pass" id="gate-C07">' in html, "a passing gate's conditions are folded"
    c07 = json.loads((real_run / "gates" / "C07.json").read_text())
    for condition in c07["conditions"]:
        assert condition["name"] in html and condition["name"] in markdown
    crossed = next(c["coverage"] for c in c07["conditions"] if "coverage" in c)  # C07's coverage record, shown
    line = f"longest context {crossed['longest_context']}: {crossed['key_blocks_crossed']} key blocks of 32 crossed"
    assert f"inputs crossed: {line}" in html and line in markdown
    fast = json.loads((real_run / "diff" / "fast.json").read_text())
    locate = json.loads((real_run / "locate" / "locate.json").read_text())
    for text in (f"{fast['max_abs_dp']:.6g}", f"{SYNTHETIC_THROUGHPUT['ratio']:.6g}", "baseline-v1", "attention"):
        assert text in html and text in markdown, text
    if locate["status"] == "divergent":
        assert f"| region | `{locate['region']}` |" in markdown
        assert f"| magnitude.ulps | `{locate['magnitude']['ulps']}` |" in markdown


def test_plots_are_drawn_from_the_data_inlined_in_html_and_linked_in_markdown(real_run, rendered):
    for name in ("token_abs_dp", "rl_steps", "throughput"):
        assert (real_run / "plots" / f"{name}.svg").is_file(), name
        assert f'id="plot-{name}"' in rendered["report.html"] and f"](plots/{name}.svg)" in rendered["report.md"]
    assert rendered["report.html"].count("<svg") == 3
    consistent = json.loads((real_run / "diff" / "consistent.json").read_text())["abs_dp"]
    zeros = sum(1 for v in consistent if v == 0)
    token_plot = (real_run / "plots" / "token_abs_dp.svg").read_text()
    assert f"consistent: {zeros} of {len(consistent)} exactly 0" in token_plot
    steps = (real_run / "plots" / "rl_steps.svg").read_text()
    assert f"0 of {len(SYNTHETIC_C09_PER_STEP)} exactly 0, max {max(SYNTHETIC_C09_PER_STEP):.3g}" in steps


def test_html_is_self_contained_and_links_every_raw_file(real_run, rendered):
    html, markdown = rendered["report.html"], rendered["report.md"]
    for external in ('src="http', "src='http", 'href="http', 'href="//', "url(http", "<script", "<link", "<img"):
        assert external not in html, external
    raw = [p.relative_to(real_run).as_posix() for p in real_run.rglob("*")
           if p.is_file() and p.name not in ("report.md", "report.html")]
    assert "locate/locate.json" in raw and "profile/samples.jsonl" in raw
    for path in raw:
        assert f'href="{path}"' in html and f"]({path})" in markdown, path


def test_rerender_writes_the_same_bytes(real_run, rendered):
    first = {p: p.read_bytes() for p in [real_run / "report.md", real_run / "report.html",
                                         *sorted((real_run / "plots").glob("*.svg"))]}
    assert main(["report", str(real_run)]) == EXIT_OK
    assert {p: p.read_bytes() for p in first} == first
    written = render(real_run)
    assert written["report.html"] == real_run / "report.html" and len(written["plots"]) == 3
    assert {p: p.read_bytes() for p in first} == first


def test_a_run_without_locate_or_profile_says_not_run_and_a_failed_stage_says_why(real_run, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(real_run / "gates", partial / "gates", ignore=shutil.ignore_patterns("C09.json"))
    assert main(["report", str(partial)]) == EXIT_OK
    html, markdown = (partial / "report.html").read_text(), (partial / "report.md").read_text()
    assert "not run (locate runs only when a gate failed)" in html and "_not run (locate runs" in markdown
    assert '<p class="absent-note" id="profile">not run</p>' in html and "<svg" not in html
    assert not (partial / "plots").exists() or not list((partial / "plots").glob("*.svg"))
    (partial / "run.json").write_text(json.dumps({"model": "qwen3", "stages": {
        "profile": {"status": "failed", "detail": "baseline worktree missing"}, "gates": {"status": "done"}}}))
    render(partial)
    assert "failed: baseline worktree missing" in (partial / "report.html").read_text()
    assert "_failed: baseline worktree missing_" in (partial / "report.md").read_text()


def test_missing_or_wrong_run_directory_is_a_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nowhere")]) == EXIT_BAD_INPUT
    assert f"harness report: run directory {tmp_path / 'nowhere'} does not exist" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == EXIT_BAD_INPUT
    assert "is not a run directory" in capsys.readouterr().err


def _png_size(path: Path) -> tuple:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", header[16:24])


FIRST_SCREEN_PROBE = """<script>
const boxes = {};
for (const id of ["verdict", "gate-summary", "gate-C07"]) {
  const r = document.getElementById(id).getBoundingClientRect();
  boxes[id] = {top: r.top, bottom: r.bottom, height: r.height};
}
boxes["verdict-text"] = document.getElementById("verdict").innerText;
boxes["gate-summary-text"] = document.getElementById("gate-summary").innerText;
document.body.setAttribute("data-first-screen", JSON.stringify(boxes));
</script>"""


def _first_screen(base, report: Path, tmp_path) -> dict:
    """Where the verdict, the gate summary and a gate's detail sit in a 1280 x 900 window:
    a copy of the report with a probe script, laid out by headless Chromium (--dump-dom)."""
    probe = tmp_path / "probe.html"
    probe.write_text(report.read_text().replace("</body>", FIRST_SCREEN_PROBE + "</body>"))
    dom = subprocess.run([*base, "--window-size=1280,900", "--dump-dom", probe.as_uri()], capture_output=True,
                         text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'data-first-screen="([^"]*)"', dom.stdout)
    assert found, "the probe script did not run"
    return json.loads(unescape(found.group(1)))


def test_report_renders_in_headless_chromium(real_run, rendered, tmp_path):
    assert CHROMIUM.exists(), ("headless Chromium is needed to check the report's layout: install Debian's "
                               "chromium (apt-get install -y --no-install-recommends chromium); CI installs it")
    page = (real_run / "report.html").as_uri()
    base = [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", page], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for gate in GATES:
        assert f'id="gate-{gate}"' in dom.stdout, gate
    assert dom.stdout.count("<svg") == 3 and dom.stdout.count('class="condition-row') >= 5
    first_screen = _first_screen(base, real_run / "report.html", tmp_path)
    for element in ("verdict", "gate-summary"):
        box = first_screen[element]
        assert box["bottom"] <= 900 and box["height"] > 0, f"#{element} is not on the first screen: {box}"
    assert first_screen["verdict-text"].startswith("FAIL"), first_screen["verdict-text"]  # C09 failed
    assert all(f"{gate} " in first_screen["gate-summary-text"] for gate in GATES), first_screen["gate-summary-text"]
    assert first_screen["gate-C07"]["top"] > 900, "the per-condition detail comes after the first screen"
    screenshot = tmp_path / "report.png"
    shot = subprocess.run([*base, f"--screenshot={screenshot}", "--window-size=1280,2400", page],
                          capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0 and screenshot.is_file(), shot.stderr[-2000:]
    assert _png_size(screenshot) == (1280, 2400) and screenshot.stat().st_size > 50_000


def _gate(name, status, conditions=()):
    return {"name": name, "status": status, "css": status.replace("/", ""), "raw_conditions": list(conditions)}


def test_first_screen_verdict_follows_the_worst_gate():
    """The summary's verdict: a failed gate or stage -> fail, then inconclusive, then a gate
    with no result -> incomplete, else pass (n/a named); C10's ratio comes with its noise."""
    from harness.stages.report_summary import summary
    header = {"fields": {"model": "qwen3"}, "stages": []}
    diff = [{"contract": "consistent", "absent": None, "figures": [("frac_tokens_differing", "0.25"),
                                                                   ("num_tokens", "48"), ("max_abs_dp", "0.001")]}]
    c10 = _gate("C10", "inconclusive", [{"name": "throughput", "ratio": 0.71, "noise": [0.66, 0.78]}])
    no_locate = {"absent": "not run"}
    cases = [([_gate("C00", "pass"), _gate("C07", "fail"), c10], "fail"),
             ([_gate("C00", "pass"), c10], "inconclusive"),
             ([_gate("C00", "pass"), _gate("C07", "not run")], "incomplete"),
             ([_gate("C00", "pass"), _gate("C06", "n/a")], "pass")]
    for gates, verdict in cases:
        got = summary(header, gates, diff, no_locate, [])
        assert got["verdict"] == verdict, (gates, got)
    assert "n/a here: C06" in summary(header, cases[3][0], diff, no_locate, [])["line"]
    failed_stage = {"fields": {"model": "qwen3"}, "stages": [{"name": "diff", "status": "failed"}]}
    assert summary(failed_stage, cases[3][0], diff, no_locate, [])["verdict"] == "fail"
    got = summary(header, cases[1][0], diff, no_locate, [])
    assert "C10 consistent / baseline: 0.71 [0.66, 0.78]" in got["figures"], got["figures"]
    assert "12 of 48 tokens differ" in got["figures"][0], got["figures"]
    assert "BITWISE_C10_MAX_PAIRS" in got["next"]
    repro = summary(header, cases[0][0], diff, no_locate, [{"test": "repros/r1/test_repro.py"}])
    assert "python -m pytest repros/r1/test_repro.py" in repro["next"]


def test_coverage_lines_name_each_size_and_leave_out_what_a_model_has_not():
    """One line per coverage record, per size where a gate runs several; the SSM part only
    where the model has Mamba layers; no record, no line (nothing claimed that was not run)."""
    from harness.stages.report import coverage_lines
    record = {"key_block": 32, "longest_context": 112, "key_blocks_crossed": 3, "either_side_of_a_key_block": False,
              "ssm_chunk": 16, "ssm_chunks_crossed": 6, "either_side_of_an_ssm_chunk": False}
    result = {"conditions": [{"name": "x", "status": "pass"}],
              "inputs": [{"sizes": {"cut": {"coverage": record, "has_ssm": True},
                                    "cut-quant": {"coverage": dict(record, longest_context=100), "has_ssm": False}}}]}
    assert coverage_lines(result) == ["[cut] longest context 112: 3 key blocks of 32 crossed, 6 SSM chunks of 16",
                                      "[cut-quant] longest context 100: 3 key blocks of 32 crossed"]
    assert coverage_lines({"conditions": [{"name": "y", "status": "pass", "coverage": dict(record, ssm_chunk=32)}]}) \
        == ["longest context 112: 3 key blocks of 32 crossed"]
    assert coverage_lines({"conditions": [{"name": "z", "status": "pass"}], "inputs": [{"seed": 1}]}) == []
