"""The report's plots, drawn from the run directory's raw files into RUN/plots/*.svg.

Each function reads one data file and returns the SVG's path, or None when that data is
absent (the report then says "not run"). |dp| is usually exactly 0 on the consistent side,
and zeros vanish on a log axis, so the y axes are symlog (0 sits on the bottom line) and
every legend states how many values are exactly 0. SVGs carry no date and a fixed hash
salt, so re-rendering an unchanged run writes the same bytes.
"""
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: the harness runs headless (CI, remote machines)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

SVG_STYLE = {"svg.fonttype": "none", "svg.hashsalt": "bitwise-align-report", "font.size": 9}
COLORS = {"consistent": "#1b7837", "fast": "#c51b7d", "baseline": "#4d4d4d"}


def _load(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def linear_threshold(values) -> float:
    """Symlog's linear band: below the smallest non-zero value, so every non-zero stays on
    the log part and 0 is still drawn."""
    smallest = min((v for v in values if v > 0), default=1e-12)
    return 10.0 ** (math.floor(math.log10(smallest)) - 1)


def save_svg(figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, format="svg", metadata={"Date": None})
    plt.close(figure)
    return path


def zeros_label(name: str, values) -> str:
    zeros = sum(1 for v in values if v == 0)
    return f"{name}: {zeros} of {len(values)} exactly 0, max {max(values, default=0):.3g}"


def plot_token_abs_dp(run_dir: Path):
    """Per-token |dp| of both contracts, sorted largest first, against the token fraction."""
    series = {name: (_load(run_dir / "diff" / f"{name}.json") or {}).get("abs_dp")
              for name in ("consistent", "fast")}
    series = {name: values for name, values in series.items() if values is not None}
    if not series:
        return None
    with plt.rc_context(SVG_STYLE):
        figure, axis = plt.subplots(figsize=(7, 3.4))
        for name, values in series.items():
            ordered = sorted(values, reverse=True)
            fractions = [(i + 0.5) / max(len(ordered), 1) for i in range(len(ordered))]
            # drawn thick and unclipped: an all-zero series lies on the bottom spine
            axis.plot(fractions, ordered, drawstyle="steps-mid", color=COLORS[name],
                      linewidth=3 if name == "consistent" else 1.6, clip_on=False,
                      zorder=3 if name == "consistent" else 2, label=zeros_label(name, values))
        axis.set_yscale("symlog", linthresh=linear_threshold([v for s in series.values() for v in s]))
        axis.set_ylim(bottom=0)
        axis.set_xlim(0, 1)
        axis.set_xlabel("fraction of tokens (sorted by |dp|, largest first)")
        axis.set_ylabel("|p_engine - p_trainer|")
        axis.set_title("per-token |dp|, engine vs trainer (diff/*.json)")
        axis.legend(loc="upper right")
        axis.grid(alpha=0.3)
        return save_svg(figure, run_dir / "plots" / "token_abs_dp.svg")


def plot_rl_steps(run_dir: Path):
    """max |dp| of each GRPO step, one line per `engine == ...` condition of C09."""
    gate = _load(run_dir / "gates" / "C09.json") or {}
    conditions = [c for c in gate.get("conditions", [])
                  if c.get("name", "").startswith("engine ==") and c.get("per_step_max_abs_dp")]
    if not conditions:
        return None
    with plt.rc_context(SVG_STYLE):
        figure, axis = plt.subplots(figsize=(7, 3.2 + 0.25 * len(conditions)))
        markers = "os^dv"
        for index, condition in enumerate(conditions):
            values = condition["per_step_max_abs_dp"]
            axis.plot(range(len(values)), values, marker=markers[index % len(markers)], markersize=4,
                      linewidth=1.2, clip_on=False, label=zeros_label(condition["name"], values))
        everything = [v for c in conditions for v in c["per_step_max_abs_dp"]]
        axis.set_yscale("symlog", linthresh=linear_threshold(everything))
        axis.set_ylim(bottom=0)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_xlabel("GRPO step")
        axis.set_ylabel("max |dp| in the step")
        axis.set_title(f"engine vs trainer over RL steps, contract {gate.get('contract', '?')} (gates/C09.json)")
        axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8)  # below: never over the data
        axis.grid(alpha=0.3)
        return save_svg(figure, run_dir / "plots" / "rl_steps.svg")


def plot_throughput(run_dir: Path):
    """Every rollout throughput sample in measured order (A B A B ...), medians dashed."""
    profile = _load(run_dir / "profile" / "profile.json") or {}
    throughput = profile.get("rollout_tokens_per_s") or {}
    if not (throughput.get("baseline") or throughput.get("consistent")):
        return None
    with plt.rc_context(SVG_STYLE):
        figure, axis = plt.subplots(figsize=(7, 3.2))
        for name in ("baseline", "consistent"):
            samples, median = throughput.get(name) or [], throughput.get(f"median_{name}")
            axis.plot(range(1, len(samples) + 1), samples, "o", color=COLORS[name],
                      label=f"{name}: {len(samples)} samples, median {median:.4g}" if median is not None
                      else f"{name}: {len(samples)} samples")
            if median is not None:
                axis.axhline(median, color=COLORS[name], linestyle="--", linewidth=1)
        everything = [v for name in ("baseline", "consistent") for v in throughput.get(name) or []]
        axis.set_ylim(0, max(everything, default=1) * 1.15)  # from 0: the gap is shown to scale
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_xlabel("pair (baseline and consistent alternate)")
        axis.set_ylabel("rollout tokens / s")
        ratio = throughput.get("ratio")
        ratio_text = f"consistent / baseline = {ratio:.3f}" if ratio is not None else "no ratio"
        axis.set_title(f"rollout throughput, {ratio_text} (profile/profile.json)")
        axis.legend(loc="lower right")
        axis.grid(alpha=0.3)
        return save_svg(figure, run_dir / "plots" / "throughput.svg")


PLOTS = {"token_abs_dp": plot_token_abs_dp, "rl_steps": plot_rl_steps, "throughput": plot_throughput}
