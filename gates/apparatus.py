"""Checks of the apparatus itself (gate C00): both runtimes' identities and fingerprints,
and that what judges (gates/, harness/), the frozen baseline record (baseline/) and the skill's
rules (.agents/, .claude/) are unmodified since the run's base commit: the one list of them,
which the harness's tamper scan (harness/tamper.py) reads too."""
import json
import subprocess
from pathlib import Path

from gates.baseline import ROOT  # the tree under judgement (gates/baseline.py judged_tree)
from gates.git_objects import run_git
from gates.switches import switch

JUDGING_PATHS = ("gates", "harness", "baseline", ".agents", ".claude")


def identity_mismatches(engine_identities: dict, trainer_identities: dict) -> list:
    """Names of the identities that differ between the two sides (empty when all agree)."""
    names = sorted(set(engine_identities) | set(trainer_identities))
    return [n for n in names if engine_identities.get(n) != trainer_identities.get(n)]


def modified_judging_files(base: str = "HEAD", root: Path = ROOT) -> list:
    """Files under JUDGING_PATHS that differ from `base` (committed or not), or a
    one-element list explaining why git could not tell (which counts as modified)."""
    try:
        changed = run_git(root, "diff", "--name-only", base, "--", *JUDGING_PATHS, check=True).stdout.split()
        untracked = run_git(root, "ls-files", "--others", "--exclude-standard", "--", *JUDGING_PATHS,
                            check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as error:
        return [f"(git could not compare with {base}: {error})"]
    return sorted(set(changed) | set(untracked))


def tamper_violations() -> list | None:
    """The harness's tamper scan of the tree under judgement (None when it made none)."""
    path = switch("BITWISE_TAMPER")
    if not path:
        return None
    try:
        return json.loads(Path(path).read_text())["violations"]
    except (OSError, ValueError, KeyError) as error:
        return [f"the tamper report {path} is unreadable: {error}"]
