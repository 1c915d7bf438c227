"""The gates' one way to run git (the harness runs it through GitPython, harness/workspace.py):
every command reads the objects as they are, since `git replace` can make a commit read as
another (refs/replace/ is shared by every worktree), and a commit's files are exported with
`git archive` (that commit's files alone, nothing of the working tree).
"""
import io
import subprocess
import tarfile
from pathlib import Path

GIT_TRUE_OBJECTS = ("--no-replace-objects",)


def run_git(root, *args, check: bool = False) -> subprocess.CompletedProcess:
    """`git <args>` in `root` on the true objects; output as text (CalledProcessError if check)."""
    return subprocess.run(["git", *GIT_TRUE_OBJECTS, *args], cwd=root, capture_output=True, text=True, check=check)


def export_commit(commit: str, folder, root, paths=("kernels",)) -> Path:
    """`paths` of `commit` written into `folder`."""
    archive = subprocess.run(["git", *GIT_TRUE_OBJECTS, "archive", "--format=tar", commit, *paths], cwd=root,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return Path(folder)
