"""Candidate trees for tests of the judge's workers (gates/candidate.py): this repository's
kernels with a cheat or a planted fault run at their import, and the judge's side (a folder
holding only a link to gates/) that the workers' procedures come from."""
import shutil

from gates import candidate
from gates.baseline import ROOT


def tree_with(folder, planted: str):
    """A candidate tree in `folder`: this repository's kernels with `planted` run at their import."""
    shutil.copytree(ROOT / "kernels", folder / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    init = folder / "kernels" / "__init__.py"
    init.write_text(init.read_text() + planted)
    return folder


def judge_workers_on(tree, tmp_path, monkeypatch) -> None:
    """Have this process's asks run the judge's gates on `tree`'s kernels."""
    apparatus = tmp_path / "apparatus"
    apparatus.mkdir(exist_ok=True)
    if not (apparatus / "gates").exists():
        (apparatus / "gates").symlink_to(ROOT / "gates", target_is_directory=True)
    monkeypatch.setattr(candidate, "JUDGE_ROOT", apparatus)
    monkeypatch.setenv("PYTHONPATH", str(tree))
