"""The report's agents section: for each agent of a `harness run --agent ...`, its outcome,
budget used, commits (their messages carry the gate results), the gates the harness ran when
it revalidated, the tamper scans and links to the transcripts and the review note."""
import json
from pathlib import Path

ROLES = ("baseline", "consistent")
RESULT_KEYS = ("status", "after", "branch", "turns", "input_tokens", "output_tokens", "cost_usd")


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _relative(root: Path, paths) -> list:
    return [p.relative_to(root).as_posix() for p in sorted(paths)]


def agent_sections(root: Path) -> list:
    """One dict per agent that ran (none when the run had no agents)."""
    sections = []
    for role in ROLES:
        folder = root / "agents" / role
        result = _read(folder / "result.json")
        if result is None and not folder.is_dir():
            continue
        gates = {p.stem: (_read(p) or {}).get("status", "unreadable")
                 for p in sorted((folder / "revalidate").glob("C*.json"))}
        violations = sorted({v for p in folder.glob("tamper/*.json") for v in (_read(p) or {}).get("violations", [])})
        sections.append({
            "role": role, "rows": [(k, str((result or {}).get(k, "—"))) for k in RESULT_KEYS],
            "commits": [(c["sha"][:12], c["body"].strip()) for c in _read(folder / "commits.json") or []],
            "revalidated": sorted(gates.items()), "violations": violations,
            "transcripts": _relative(root, folder.glob("transcript-*.jsonl")),
            "review": _relative(root, folder.glob("review.md"))})
    return sections
