"""Gate runs against an agent's worktree from the harness's own pristine copy of the judge.
The base commit's gates/ and harness/ are exported (git archive) into RUN/apparatus once; each
gate runs as `python -m pytest` with cwd = that copy, the agent's `kernels` after it on PYTHONPATH
through a folder holding only that link; plugin autoload off, --noconftest, no bytecode, the gates'
own plugin loaded explicitly. Before each run the copy is compared with a new export of the base
commit, and an edited copy is refused. The environment names the judged tree (BITWISE_TREE), the
base commit (BITWISE_BASE) and the harness's tamper scan (BITWISE_TAMPER, C00).
"""
import functools
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gates.git_objects import export_commit
from harness.secrets import allowed_environment
from harness.workspace import open_repo, repo_root


@dataclass(frozen=True, slots=True)
class Isolation:
    """How to run the gates against a tree that is not the harness's own."""

    tree: Path
    """The worktree under judgement (its kernels/ is what runs)."""
    apparatus: Path
    """The pristine gates/ and harness/ exported from the base commit."""
    base: str
    """The run's base commit."""
    tamper_report: Path
    """The harness's scan of `tree`, written before the gate run (C00 reads it)."""

    def gate_path(self, gate_path: Path) -> Path:
        return self.apparatus / "gates" / Path(gate_path).name

    def pytest_args(self) -> list:
        # -c: the copy's own empty ini, so pytest never picks up the repository's pyproject
        # (its `pythonpath = ["."]` would put the judged tree's gates/ first)
        return ["--noconftest", "-p", "gates.conftest", "-c", str(self.apparatus / "pytest.ini"),
                "--rootdir", str(self.apparatus)]

    def require_pristine(self) -> None:
        """ValueError unless the apparatus holds exactly the base commit's gates/ and harness/
        (an agent's shell can reach the run directory: a copy edited after the export would
        judge in the agent's favour). Checked before every gate run, against a new export of
        the base made once."""
        if folder_digest(self.apparatus) != _base_digest(self.base):
            raise ValueError(f"TAMPERING: the judge's copy {self.apparatus} differs from gates/ and harness/ at "
                             f"{self.base[:12]}: refusing to judge with it")

    def import_root(self) -> Path:
        """A folder the judge makes beside the apparatus holding one entry, `kernels`, a link to
        the tree's: on sys.path instead of the tree, so a `pytest/`, `sitecustomize/` or
        `torch.py` at the tree's root cannot shadow what the judge imports."""
        root = self.apparatus.parent / "judged-imports" / self.tree.name
        link = root / "kernels"
        root.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink() or link.readlink() != self.tree / "kernels":
            link.unlink(missing_ok=True)
            link.symlink_to(self.tree / "kernels", target_is_directory=True)
        return root

    def env(self) -> dict:
        """The judge's environment: allow-listed (harness/secrets.py: no credential reaches a
        process that imports the judged tree), with the tree and the apparatus named."""
        return allowed_environment(PYTHONPATH=os.pathsep.join([str(self.apparatus), str(self.import_root())]),
                                   PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONDONTWRITEBYTECODE="1",
                                   BITWISE_TREE=str(self.tree),
                                   BITWISE_APPARATUS=str(self.apparatus), BITWISE_BASE=self.base,
                                   BITWISE_TAMPER=str(self.tamper_report))


def export_apparatus(base: str, folder: Path) -> Path:
    """gates/ and harness/ at `base`, once per run (kept: the copy the run is judged by)."""
    if not (folder / "gates" / "conftest.py").exists():
        _export(base, folder)
    return folder


def _export(base: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    export_commit(base, folder, repo_root(open_repo(Path(__file__))), paths=("gates", "harness"))
    (folder / "pytest.ini").write_text("[pytest]\n")
    return folder


@functools.lru_cache(maxsize=None)
def _base_digest(base: str) -> str:
    """folder_digest of a new export of `base` (a commit's objects do not change: once each)."""
    with tempfile.TemporaryDirectory(prefix="apparatus-") as fresh:
        return folder_digest(_export(base, Path(fresh)))


def folder_digest(folder: Path) -> str:
    """sha256 over every entry below `folder`: relative path, then the file's bytes or a link's
    target, so an added, removed, edited or relinked file changes it."""
    digest = hashlib.sha256()
    for path in sorted(Path(folder).rglob("*")):
        if path.is_dir() and not path.is_symlink():
            continue
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()
