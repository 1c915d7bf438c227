"""Anti-tamper: what an agent's worktree may not contain, checked before every gate run.
Agents are known to game evaluators (patched timers, cached outputs, a conftest.py passing all).
The gates run from a pristine copy (harness/pristine.py); this scan names what the agent changed
that it must not: the judge, the frozen baseline record or the skill (gates/apparatus.py's
JUDGING_PATHS; the record also against the copy kept outside the repository), a file Python or
pytest loads on its own, committed bytecode, `git replace` refs, a harness secret in a commit
message or changed file, a change outside its territory (harness/territory.py), or a changed
interpreter start-up file. Any violation fails gate C00 and is reported.
"""
import hashlib
import json
import os
import site
from pathlib import Path

from gates.apparatus import JUDGING_PATHS
from harness.secrets import holds_secret
from harness.territory import trespasses
from harness.workspace import read_from_outside

JUDGING_DIRS = tuple(f"{path}/" for path in JUDGING_PATHS)
AUTOLOADED_NAMES = ("conftest.py", "sitecustomize.py", "usercustomize.py")


def scan(tree, base: str, frozen_outside: dict | None, startup_at_start: dict | None = None,
         role: str | None = None) -> list:
    """Violations (one sentence each) in `tree` relative to the run's base commit; with
    startup_at_start (startup_files() when the run started), changes to those files too; with
    the agent's role, each change outside its territory (harness/territory.py)."""
    violations = []
    if startup_at_start is not None:
        now = startup_files()
        violations += [f"changed a file every Python process runs at start-up: {path}"
                       for path in sorted(set(now) | set(startup_at_start))
                       if now.get(path) != startup_at_start.get(path)]
    with read_from_outside(tree) as view:  # git never runs inside the agent's repository
        changed = view.differing_paths(base)
        for path in changed:
            if path.startswith(JUDGING_DIRS):
                violations.append(f"edited the judge, the frozen baseline record or the skill: {path}")
            if path.endswith((".pyc", ".pyo")) or "__pycache__/" in path:  # committed or not ignored
                violations.append(f"added compiled bytecode, which Python may load instead of the source: {path}")
        at_base = view.files_at(base)
        for path in _autoloaded_files(Path(tree)):  # git-ignored ones too: a .gitignore hides nothing here
            if path not in at_base:
                violations.append(f"added a file Python or pytest loads on its own: {path}")
        if role is not None:
            violations.extend(trespasses(role, changed))
        violations.extend(_frozen_violations(view, frozen_outside))
        violations.extend(_secret_violations(view, base, changed))
        violations.extend(f"rewrote objects with git replace: {ref}" for ref in view.replace_refs())
    return violations


def _secret_violations(view, base: str, changed: list) -> list:
    """Where a secret of the harness's environment sits in what the agent wrote: a commit
    message or one of the `changed` files (named, never quoted)."""
    found = [f"commit {c['sha'][:12]}'s message holds a secret" for c in view.commits_since(base)
             if holds_secret(c["body"])]
    for path in changed:
        file = view.tree / path
        if file.is_file() and not file.is_symlink() and holds_secret(file.read_text(errors="replace")):
            found.append(f"{path} holds a secret")
    return found


def startup_files() -> dict:
    """{path: sha256} of what the interpreter runs before any code of ours: the *.pth files and
    sitecustomize / usercustomize of its site directories (a shell command can write there,
    outside any worktree)."""
    found = {}
    for folder in sorted(set(site.getsitepackages()) | {site.getusersitepackages()}):
        if not Path(folder).is_dir():
            continue
        for entry in sorted(Path(folder).iterdir()):
            if entry.suffix == ".pth" or entry.stem in ("sitecustomize", "usercustomize"):
                found[str(entry)] = hashlib.sha256(entry.read_bytes()).hexdigest() if entry.is_file() else "folder"
    return found


def _autoloaded_files(tree: Path) -> list:
    found = []
    for folder, subfolders, files in os.walk(tree):
        subfolders[:] = [d for d in subfolders if d != ".git"]
        found += [str((Path(folder) / f).relative_to(tree)) for f in files
                  if f in AUTOLOADED_NAMES or f.endswith(".pth")]
    return sorted(found)


def _frozen_violations(view, frozen_outside: dict | None) -> list:
    record_path = view.tree / "baseline" / "frozen.json"
    inside = json.loads(record_path.read_text()) if record_path.exists() else None
    if inside != frozen_outside:
        return [f"the frozen baseline record differs from the one recorded when the run started: "
                f"{inside} vs {frozen_outside}"]
    if frozen_outside is None:
        return []
    tagged = view.tag(frozen_outside["tag"])
    if tagged is not None and tagged != frozen_outside["commit"]:  # tags need not travel with a clone
        return [f"tag {frozen_outside['tag']} was moved to {tagged[:12]} (frozen at {frozen_outside['commit'][:12]})"]
    return []


def write_report(path: Path, tree, base: str, frozen_outside: dict | None,
                 startup_at_start: dict | None = None, role: str | None = None) -> list:
    """Scan and write {tree, base, violations} as JSON (gate C00 reads it); the violations."""
    violations = scan(tree, base, frozen_outside, startup_at_start, role)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"tree": str(tree), "base": base, "violations": violations}, indent=2))
    return violations
