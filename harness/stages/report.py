"""`harness report RUN_DIR`: render report.md and report.html from a run directory's files.

Everything shown is read from the raw files (harness/run_directory.md) and links back to
the file it came from, so re-rendering an unchanged run writes the same bytes. A part of
the run that is missing is shown as "not run", or as run.json's "failed: <detail>" for a
stage that failed, never as an error. report.html is self-contained (inline CSS and SVG).
"""
import json
import sys
from pathlib import Path

from markupsafe import Markup

from harness.exit_codes import EXIT_OK
from harness.secrets import redact
from harness.stages import target_report
from harness.stages.gates import describe, discover
from harness.stages.plots import PLOTS
from harness.stages.report_agents import agent_sections
from harness.stages.report_summary import summary
from harness.stages.report_templates import templates_environment
from harness.stages.report_values import flatten, format_value, ratio_with_noise

REPORTS = ("report.md", "report.html")
KNOWN_ENTRIES = ("run.json", "gates", "diff", "locate", "repros", "profile")
DIFF_FIGURES = ("max_abs_dp", "mean_abs_dp", "std_abs_dp", "k3_kl", "frac_tokens_differing", "num_tokens")
LOCATE_HEADLINE = ("status", "layer", "region", "ordinal", "cases", "token.sequence", "token.position",
                   "cases_differing", "num_tokens_differing", "num_tokens_compared",
                   "magnitude.ulps", "magnitude.agreeing_leading_bits",
                   "magnitude.width_bits", "magnitude.engine_value", "magnitude.trainer_value", "magnitude.detail")
PLOT_TITLES = {"token_abs_dp": "per-token |dp|, consistent vs fast", "rl_steps": "|dp| over GRPO steps (C09)",
               "throughput": "rollout throughput, consistent vs baseline"}
PLOT_SOURCES = {"token_abs_dp": "diff/consistent.json, diff/fast.json", "rl_steps": "gates/C09.json",
                "throughput": "profile/profile.json"}


class RunFiles:
    """The run directory being reported: reads its JSON (an unreadable file is noted as a
    problem and treated as absent) and says what a missing part means, from run.json."""

    def __init__(self, run_dir: Path):
        self.root, self.problems = run_dir, []
        self.run = self.json("run.json") or {}

    def json(self, relative: str):
        path = self.root / relative
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as error:
            problem = f"{relative}: unreadable ({error})"
            if problem not in self.problems:  # several sections may read the same file
                self.problems.append(problem)
            return None

    def absence(self, stage: str, default: str = "not run") -> str:
        """Why a stage's output is missing: run.json's status and detail, else `default`."""
        entry = (self.run.get("stages") or {}).get(stage) or {}
        status, detail = entry.get("status"), entry.get("detail")
        if status in (None, "done"):  # done without this output: e.g. a gate left out by --only
            return default
        return f"{status}: {detail}" if detail else status

    def files(self) -> list:
        """Every file but the reports, as (relative path, size in bytes)."""
        found = [p for p in sorted(self.root.rglob("*")) if p.is_file() and p.name not in REPORTS]
        return [(p.relative_to(self.root).as_posix(), p.stat().st_size) for p in found]


def header(files: RunFiles) -> dict:
    """Model, contract, device, commit: run.json first, else what the gates recorded."""
    gate_results = sorted((files.root / "gates").glob("C*.json"))
    first_gate = files.json(f"gates/{gate_results[0].name}") if gate_results else None
    fallback = first_gate or files.json("diff/consistent.json") or files.json("profile/profile.json") or {}
    device = files.run.get("device") or (fallback.get("environment") or {}).get("device")
    fields = {"model": files.run.get("model") or fallback.get("model"),
              "contract": files.run.get("contract") or fallback.get("contract"),
              "device": device, "commit": files.run.get("commit") or fallback.get("commit"),
              "agent": files.run.get("agent"), "started": files.run.get("started")}
    stages = [{"name": name, "status": entry.get("status"), "detail": entry.get("detail") or "",
               "finished": entry.get("finished") or ""}
              for name, entry in (files.run.get("stages") or {}).items()]
    argv = files.run.get("argv")
    return {"fields": {k: ("—" if v is None else str(v)) for k, v in fields.items()}, "stages": stages,
            "argv": " ".join(argv) if isinstance(argv, list) else argv}


def coverage_lines(result: dict) -> list:
    """What a gate's inputs crossed, one line per `coverage` record its JSON holds (gates/
    boundaries.py: in a condition's figures or in the inputs, per size where the gate runs
    several): the longest context, the key blocks and the SSM chunks it ran past."""
    lines = []

    def walk(value, size=""):
        items = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else []
        if isinstance(value, dict) and isinstance(value.get("coverage"), dict):
            record = value["coverage"]
            if "key_blocks_crossed" in record:
                ssm = value.get("has_ssm", record["ssm_chunk"] != record["key_block"])
                line = (f"{f'[{size}] ' if size else ''}longest context {record['longest_context']}: "
                        f"{record['key_blocks_crossed']} key blocks of {record['key_block']} crossed"
                        + (f", {record['ssm_chunks_crossed']} SSM chunks of {record['ssm_chunk']}" if ssm else ""))
                lines.extend([] if line in lines else [line])
        if isinstance(value, dict) and isinstance(value.get("sizes"), dict):
            for name, item in value["sizes"].items():
                walk(item, name)
            items = [item for key, item in value.items() if key != "sizes"]
        for item in items:
            walk(item, size)

    walk({"conditions": result.get("conditions", []), "inputs": result.get("inputs", [])})
    return lines


def _gate_row(files: RunFiles, name: str, title: str) -> dict:
    result = files.json(f"gates/{name}.json")
    if result is None:
        absence = files.absence("gates")
        return {"name": name, "title": title, "status": absence, "href": None, "conditions": [],
                "css": "fail" if absence.startswith("failed") else "absent", "not_applicable": [],
                "raw_conditions": [], "coverage": []}
    conditions = []
    for condition in result.get("conditions", []):
        figures = [f"{k}: {format_value(v)}" for k, v in condition.items() if k not in ("name", "status")]
        conditions.append({"name": condition.get("name", "?"), "status": condition.get("status", "?"),
                           "figures": "; ".join(figures)})
    status = result.get("status", "?")
    return {"name": name, "title": title, "status": status, "css": status.replace("/", ""),
            "href": f"gates/{name}.json", "conditions": conditions, "raw_conditions": result.get("conditions", []),
            "not_applicable": result.get("not_applicable") or [], "coverage": coverage_lines(result)}


def gate_rows(files: RunFiles) -> list:
    """One row per gate (those in gates/ and those this run wrote), each with its conditions."""
    modules = discover()
    names = sorted(set(modules) | {p.stem for p in (files.root / "gates").glob("C*.json")})
    titles = {name: describe(path)[0].removeprefix(f"Gate {name}: ").rstrip(".") for name, path in modules.items()}
    return [_gate_row(files, name, titles.get(name, "")) for name in names]


def diff_section(files: RunFiles) -> list:
    sides = []
    for contract in ("consistent", "fast"):
        result = files.json(f"diff/{contract}.json")
        figures = [(k, format_value(result.get(k))) for k in DIFF_FIGURES] if result else []
        sides.append({"contract": contract, "href": f"diff/{contract}.json" if result else None,
                      "figures": figures, "absent": None if result else files.absence("diff")})
    return sides


def locate_section(files: RunFiles) -> dict:
    result = files.json("locate/locate.json")
    if result is None:
        return {"absent": files.absence("locate", "not run (locate runs only when a gate failed)")}
    rows = dict(flatten(result))
    headline = [(key, rows.pop(key)) for key in LOCATE_HEADLINE if key in rows]
    return {"absent": None, "href": "locate/locate.json", "rows": headline, "more": list(rows.items())}


def repro_sections(files: RunFiles) -> list:
    repros = []
    for directory in sorted(p for p in (files.root / "repros").glob("*") if p.is_dir()):
        relative = directory.relative_to(files.root).as_posix()
        repro = files.json(f"{relative}/repro.json") or {}
        test = directory / "test_repro.py"
        repros.append({"id": directory.name, "href": f"{relative}/repro.json", "rows": flatten(repro),
                       "test": f"{relative}/test_repro.py" if test.is_file() else None})
    return repros


def _measure(measure: dict) -> dict:
    samples = f"{len(measure.get('baseline') or [])} + {len(measure.get('consistent') or [])}"
    figures = {key: format_value(measure.get(key)) for key in ("median_baseline", "median_consistent")}
    return figures | {"ratio": ratio_with_noise(measure.get("ratio"), measure.get("noise")), "samples": samples}


def profile_section(files: RunFiles) -> dict:
    profile = files.json("profile/profile.json")
    if profile is None:
        return {"absent": files.absence("profile")}
    measures = {key: _measure(profile.get(key) or {}) for key in ("rollout_tokens_per_s", "train_step_s")}
    columns = ("region", "baseline_ms", "consistent_ms", "extra_ms")
    regions = [{key: format_value(region.get(key)) for key in columns} for region in profile.get("regions") or []]
    return {"absent": None, "href": "profile/profile.json", "measures": measures, "regions": regions,
            "baseline": flatten(profile.get("baseline") or {}), "workload": flatten(profile.get("workload") or {}),
            "samples_href": "profile/samples.jsonl" if (files.root / "profile/samples.jsonl").is_file() else None}


def environment_sections(files: RunFiles) -> list:
    """The environment as each source recorded it (gates' fingerprint, the profile's)."""
    sources = [p.relative_to(files.root).as_posix() for p in sorted((files.root / "gates").glob("C*.json"))[:1]]
    sources += ["profile/profile.json"]
    found = [(source, (files.json(source) or {}).get("environment")) for source in sources]
    return [{"source": source, "rows": flatten(env)} for source, env in found if isinstance(env, dict)]


def draw_plots(files: RunFiles) -> list:
    """Each plot's title, its SVG (to inline) and where its data came from; stale SVGs of a
    plot whose data is gone are removed so the report never shows an old figure."""
    plots = []
    for name, draw in PLOTS.items():
        try:
            path = draw(files.root)
        except (OSError, ValueError, KeyError, TypeError) as error:
            files.problems.append(f"plot {name}: {error}")
            path = None
        if path is None:
            (files.root / "plots" / f"{name}.svg").unlink(missing_ok=True)
        svg = path.read_text().split("<svg", 1)[1] if path else None  # drop the XML prolog to inline it
        plots.append({"name": name, "title": PLOT_TITLES[name], "source": PLOT_SOURCES[name],
                      "href": f"plots/{name}.svg" if path else None, "svg": Markup("<svg" + svg) if svg else None,
                      "path": path})
    return plots


def render(run_dir: Path) -> dict:
    """Write RUN/plots/*.svg, RUN/report.md and RUN/report.html; returns their paths."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"run directory {run_dir} does not exist (give the --out of harness run or gates)")
    if not any((run_dir / entry).exists() for entry in KNOWN_ENTRIES):
        raise ValueError(f"{run_dir} is not a run directory: it holds none of {', '.join(KNOWN_ENTRIES)}")
    files = RunFiles(run_dir)
    plots = draw_plots(files)
    context = {"header": header(files), "gates": gate_rows(files), "diff": diff_section(files),
               "locate": locate_section(files), "repros": repro_sections(files), "plots": plots,
               "profile": profile_section(files), "environments": environment_sections(files),
               "files": files.files(), "run_dir": run_dir.name, "shrink_absent": files.absence("shrink"),
               "agents": agent_sections(run_dir)}
    context["summary"] = summary(context["header"], context["gates"], context["diff"], context["locate"],
                                 context["repros"])
    context["problems"] = files.problems
    templates, written = templates_environment(), {}
    for report in REPORTS:
        path = run_dir / report
        path.write_text(redact(templates.get_template(f"{report}.j2").render(**context)))  # an agent's text too
        written[report] = path
    written["plots"] = [plot["path"] for plot in plots if plot["path"]]
    return written


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (harness run --out)")


def run(args) -> int:
    run_dir = Path(args.run_dir)
    state = run_dir / "run.json"
    if state.exists() and json.loads(state.read_text()).get("target", "ours") != "ours":
        for path in target_report.render(run_dir).values():  # a run on another stack: its own report
            print(path)
        return EXIT_OK
    written = render(run_dir)
    for path in [written["report.md"], written["report.html"], *written["plots"]]:
        print(path)
    if not written["plots"]:
        print("(no plot: their data files are not in the run yet)", file=sys.stderr)
    return EXIT_OK
