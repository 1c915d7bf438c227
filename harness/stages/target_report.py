"""The report of `harness run --target T`: for a person deciding what to fix in a stack we did not
write. Which properties it has (C01 deterministic, C02 batch invariant, C03 decode == prefill,
C07 engine == trainer), by how much it misses (diff's max, mean, std |dp|, k3 KL, fraction of
tokens), where it first diverges (locate's module) and the guide for each miss; the gates it
could not be judged on, with the reason. Read from the run directory's raw files only.
"""
import json
from pathlib import Path

from harness.secrets import redact
from harness.stages.report_templates import templates_environment

PROPERTIES = {"C01": ("deterministic run to run", "guides/gemm-split-k.md"),
              "C02": ("batch invariant: a prompt's bits alone == in any batch", "guides/gemm-split-k.md"),
              "C03": ("phase consistent: decode == a fresh prefill", "guides/attention-split-kv.md"),
              "C07": ("engine == trainer on the same tokens", "guides/norm-logprob-reductions.md")}
"""The properties an outside target is judged on: (what the gate says of it, the guide for a miss)."""
FIGURES = ("max_abs_dp", "mean_abs_dp", "std_abs_dp", "k3_kl", "frac_tokens_differing", "num_tokens")


def _read(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def _measured(condition: dict) -> str:
    """The figures a condition recorded, as one short line."""
    if "measured" in condition:
        return f"{condition['name'].split(' ')[0]} {condition['measured']:.3g} over {condition['num_tokens']} tokens"
    keys = ("num_tokens", "num_tokens_compared", "placements_compared", "moved", "differing_cuts")
    return ", ".join(f"{k} {condition[k]}" for k in keys if k in condition)


def _gate_rows(run_dir: Path) -> list:
    rows = []
    for path in sorted((run_dir / "gates").glob("C*.json")):
        gate = json.loads(path.read_text())
        what, guide = PROPERTIES.get(gate["gate"], (None, None))
        failed = [c for c in gate["conditions"] if c["status"] == "fail"]
        rows.append({"gate": gate["gate"], "status": gate["status"], "property": what,
                     "guide": guide if gate["status"] == "fail" else None,
                     "reason": "; ".join(gate["not_applicable"]) if gate["status"] == "n/a" else "",
                     "conditions": [{"name": c["name"], "status": c["status"], "figures": _measured(c)}
                                    for c in gate["conditions"] if c["status"] != "n/a"],
                     "failed": [c["name"] for c in failed]})
    return rows


def context(run_dir: Path) -> dict:
    run = _read(run_dir / "run.json") or {}
    gates = _gate_rows(run_dir)
    judged = [g for g in gates if g["property"] and g["status"] in ("pass", "fail")]
    environment = next((json.loads(p.read_text())["environment"] for p in sorted((run_dir / "gates").glob("C*.json"))),
                       {})
    diff = _read(run_dir / "diff" / "target.json")
    return {"target": run.get("target"), "checkpoint": run.get("checkpoint"), "commit": run.get("commit", ""),
            "stages": run.get("stages", {}), "environment": environment, "gates": gates,
            "has": [g for g in judged if g["status"] == "pass"], "lacks": [g for g in judged if g["status"] == "fail"],
            "unjudged": [g for g in gates if g["status"] == "n/a"],
            "diff": {name: diff[name] for name in FIGURES} if diff else None,
            "locate": _read(run_dir / "locate" / "locate.json")}


def render(run_dir) -> dict:
    """Write RUN/report.md and RUN/report.html; {name: path}."""
    run_dir = Path(run_dir)
    templates = templates_environment()
    found = context(run_dir)
    written = {}
    for name in ("report.md", "report.html"):
        (run_dir / name).write_text(redact(templates.get_template(f"target_{name}.j2").render(**found)))
        written[name] = run_dir / name
    return written
