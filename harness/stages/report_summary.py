"""The report's first screen: the run's verdict, one status per gate, the figures a reviewer
asks for first (engine vs trainer per contract, C10's ratio with its noise) and what to do
next, all read from the same rows the detailed sections show (report.py), so the summary
and the detail cannot disagree.

Verdict, first match wins: a failed gate or stage -> "fail"; an inconclusive gate ->
"inconclusive"; a gate with no result -> "incomplete"; else "pass" (a gate that is n/a
counts as neither pass nor fail and is named).
"""
from harness.stages.report_values import ratio_with_noise

VERDICT_LINES = {
    "fail": "a gate failed: the engine and the trainer (or the speed) do not meet a pass condition",
    "inconclusive": "no gate failed, but C10 could not decide within its pairs",
    "incomplete": "no gate failed, but some gates have no result",
    "pass": "every gate that ran passed",
}


def _c10_figure(gates: list) -> str | None:
    c10 = next((g for g in gates if g["name"] == "C10"), None)
    for condition in (c10 or {}).get("raw_conditions", []):
        if "ratio" in condition:
            return f"C10 consistent / baseline: {ratio_with_noise(condition['ratio'], condition.get('noise'))}"
    return None


def _diff_figures(diff: list) -> list:
    lines = []
    for side in diff:
        if side["absent"]:
            lines.append(f"{side['contract']}: {side['absent']}")
            continue
        figures = dict(side["figures"])
        try:
            total = int(figures["num_tokens"])
            differing = f"{round(float(figures['frac_tokens_differing']) * total)} of {total} tokens differ"
        except (KeyError, ValueError):
            differing = f"fraction of tokens differing {figures.get('frac_tokens_differing', '?')}"
        lines.append(f"{side['contract']} contract, engine vs trainer: {differing}, "
                     f"max |dp| {figures.get('max_abs_dp', '?')}")
    return lines


def _next_step(verdict: str, failed: list, header: dict, locate: dict, repros: list) -> str:
    model = header["fields"].get("model", "MODEL")
    if verdict == "fail":
        if repros and repros[0].get("test"):
            return f"run the shrunk repro: python -m pytest {repros[0]['test']} (then fix the op it names)"
        if not locate.get("absent"):
            where = dict(locate.get("rows") or [])
            return (f"the first divergent op is {where.get('region', '?')} in layer {where.get('layer', '?')}: "
                    f"harness shrink --model {model}, then fix it in the consistent path")
        return (f"failed: {', '.join(failed)}; open each gate's detail below, then "
                f"harness locate --model {model} for a divergence")
    if verdict == "inconclusive":
        return "rerun C10 on an idle machine, or allow more pairs (BITWISE_C10_MAX_PAIRS)"
    if verdict == "incomplete":
        return f"run the missing gates: harness gates --model {model} --only <names>"
    return "nothing to fix"


def summary(header: dict, gates: list, diff: list, locate: dict, repros: list) -> dict:
    """{verdict, line, chips [(gate, status, css)], figures [str], next} for the first screen."""
    statuses = {g["name"]: g["status"] for g in gates}
    failed = [name for name, status in statuses.items() if status == "fail" or status.startswith("failed")]
    failed_stages = [s["name"] for s in header.get("stages", []) if s["status"] == "failed"]
    if failed or failed_stages:
        verdict = "fail"
    elif "inconclusive" in statuses.values():
        verdict = "inconclusive"
    elif any(status not in ("pass", "n/a") for status in statuses.values()):
        verdict = "incomplete"
    else:
        verdict = "pass"
    line = VERDICT_LINES[verdict]
    not_applicable = [name for name, status in statuses.items() if status == "n/a"]
    if not_applicable:
        line += f"; n/a here: {', '.join(not_applicable)}"
    if failed_stages:
        line += f"; failed stages: {', '.join(failed_stages)}"
    figures = _diff_figures(diff)
    c10 = _c10_figure(gates)
    if c10:
        figures.append(c10)
    return {"verdict": verdict, "line": line, "figures": figures,
            "chips": [(g["name"], g["status"], g["css"]) for g in gates],
            "next": _next_step(verdict, failed or failed_stages, header, locate, repros)}
