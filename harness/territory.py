"""What each agent may change under kernels/, as paths, so that the two agents' work merges by
path and the harness can hold each to its part. The baseline agent makes the fast path fast:
its territory is the fast variants (a family's fast*.py) and the fast contract. The consistent
agent owns the rest of kernels/. The engine's bookkeeping serves both contracts and is shared.
Outside kernels/ the tamper scan decides (harness/tamper.py); a trespass is reported as
tampering is.
"""
from fnmatch import fnmatchcase

FAST = ("kernels/ops/*/fast*.py", "kernels/contract/fast.yaml")
SHARED = ("kernels/engine/*",)
GOVERNED = "kernels/"

TERRITORIES = {
    "baseline": "the fast variants (kernels/ops/<family>/fast*.py), kernels/contract/fast.yaml and the shared "
                "engine (kernels/engine/)",
    "consistent": "kernels/ but the fast variants (kernels/ops/<family>/fast*.py) and kernels/contract/fast.yaml",
}


def _matches(path: str, patterns) -> bool:
    return any(fnmatchcase(path, pattern) for pattern in patterns)


def allowed(role: str, path: str) -> bool:
    """Whether `role` may change `path` (a repository-relative path with / separators)."""
    if role not in TERRITORIES:
        raise ValueError(f"no territory for role {role!r}: one of {sorted(TERRITORIES)}")
    if not path.startswith(GOVERNED) or _matches(path, SHARED):
        return True
    fast = _matches(path, FAST)
    return fast if role == "baseline" else not fast


def trespasses(role: str, changed) -> list:
    """One sentence per changed path outside the role's territory."""
    return [f"the {role} agent changed {path}, outside its territory ({TERRITORIES[role]})"
            for path in sorted(changed) if not allowed(role, path)]
