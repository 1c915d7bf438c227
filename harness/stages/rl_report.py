"""The report of `harness rl`: reward and engine-vs-trainer mismatch per GRPO step for each
contract on one page (OUT/plots/rl_*.svg, OUT/report.md, OUT/report.html), read from the
per-step records only. Mismatch axes are symlog so an exact 0 is drawn (harness/stages/plots.py).
"""
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from harness.secrets import redact  # noqa: E402
from harness.stages.plots import COLORS, SVG_STYLE, linear_threshold, save_svg, zeros_label  # noqa: E402
from harness.stages.report_templates import templates_environment  # noqa: E402

CURVES = {"reward": ("mean reward of the step", "reward (share of even token ids)"),
          "max_abs_dp": ("max |dp|, engine vs trainer", "max |p_engine - p_trainer|"),
          "k3_kl": ("k3 KL, engine vs trainer", "k3 KL")}


def records(out: Path, contract: str) -> list:
    path = out / contract / "steps.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _series(rows: list, curve: str) -> tuple:
    """(steps, values) of one curve; a step the trainer did not score has no mismatch point."""
    if curve == "reward":
        return [r["step"] for r in rows], [r["reward"] for r in rows]
    scored = [r for r in rows if r["mismatch"] is not None]
    return [r["step"] for r in scored], [r["mismatch"][curve] for r in scored]


def plot(out: Path, runs: dict, curve: str) -> Path:
    title, label = CURVES[curve]
    with plt.rc_context(SVG_STYLE):
        figure, axis = plt.subplots(figsize=(7, 3.2))
        values_all = []
        for contract, rows in runs.items():
            steps, values = _series(rows, curve)
            values_all += values
            label = contract if curve == "reward" else zeros_label(contract, values)
            axis.plot(steps, values, marker="o", markersize=3, linewidth=1.4, clip_on=False,
                      color=COLORS.get(contract), label=label)
        if curve != "reward":
            axis.set_yscale("symlog", linthresh=linear_threshold(values_all))
            axis.set_ylim(bottom=0)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_xlabel("GRPO step")
        axis.set_ylabel(label)
        axis.set_title(title)
        axis.legend(loc="best", fontsize=8)
        axis.grid(alpha=0.3)
        return save_svg(figure, out / "plots" / f"rl_{curve}.svg")


def _summary(rows: list) -> dict:
    scored = [r["mismatch"] for r in rows if r["mismatch"] is not None]
    quarter = max(1, len(rows) // 4)
    return {"steps": len(rows), "reward_first": sum(r["reward"] for r in rows[:quarter]) / quarter,
            "reward_last": sum(r["reward"] for r in rows[-quarter:]) / quarter, "quarter": quarter,
            "scored_steps": len(scored), "max_abs_dp": max((m["max_abs_dp"] for m in scored), default=None),
            "zero_steps": sum(1 for m in scored if m["max_abs_dp"] == 0 and m["k3_kl"] == 0),
            "seconds": {phase: sum(r["seconds"][phase] for r in rows) / len(rows) for phase in rows[0]["seconds"]}}


def render(out: Path, contracts: list) -> dict:
    """Write the plots and OUT/report.md, OUT/report.html; {name: path}."""
    out = Path(out)
    runs = {contract: records(out, contract) for contract in contracts}
    runs = {contract: rows for contract, rows in runs.items() if rows}
    plots = {curve: plot(out, runs, curve).relative_to(out).as_posix() for curve in CURVES} if runs else {}
    context = {"asked": json.loads((out / "rl.json").read_text()), "plots": plots,
               "summaries": {contract: _summary(rows) for contract, rows in runs.items()}}
    templates, written = templates_environment(), {}
    for name in ("report.md", "report.html"):
        (out / name).write_text(redact(templates.get_template(f"rl_{name}.j2").render(**context)))
        written[name] = out / name
    return written
