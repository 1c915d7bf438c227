"""Git workspaces: the one harness module that runs git (through GitPython).

Repo root and current commit, a clean-tree guard, tags, ref resolution, committing named
paths only, and detached worktrees at a commit (the frozen baseline is measured from one,
under `.worktrees/`, which .gitignore hides so it never makes the main tree dirty). Every
git failure a person can cause (unknown ref, existing tag, dirty tree) is a ValueError.
"""
import os
import threading
from pathlib import Path

import git

WORKTREES_DIR = ".worktrees"
# git's worktree bookkeeping (.git/worktrees, its lock files) does not take two `worktree add`
# at once: the two agents' threads create theirs one after the other.
_WORKTREE_LOCK = threading.Lock()


# Every harness-side git command runs with hooks off (a hook planted in a worktree by an
# agent must not run with the harness's rights, or rewrite what the harness commits) and
# reads objects as they are (`git replace` must not make a commit read as another).
HARNESS_GIT_ENV = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": "/dev/null",
                   "GIT_NO_REPLACE_OBJECTS": "1"}


def judged_tree() -> Path:
    """The tree whose kernels/ run: an agent's worktree when the harness judges it from its
    pristine copy (BITWISE_TREE, harness/pristine.py), else this checkout."""
    return Path(os.environ.get("BITWISE_TREE") or Path(__file__).resolve().parents[1])


def open_repo(path=".") -> git.Repo:
    """The repository containing `path` (searching upwards); ValueError outside one."""
    try:
        repo = git.Repo(Path(path).resolve(), search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as error:
        raise ValueError(f"{path}: not inside a git repository") from error
    repo.git.update_environment(**HARNESS_GIT_ENV)
    return repo


def git_common_dir(path) -> Path | None:
    """The git directory that `path`'s repository keeps its objects and refs in (shared by all
    its worktrees), or None outside a repository."""
    try:
        return Path(open_repo(path).common_dir).resolve()
    except ValueError:
        return None


def repo_root(repo: git.Repo) -> Path:
    return Path(repo.working_tree_dir)


def current_commit(repo: git.Repo) -> str:
    """HEAD's full sha."""
    return repo.head.commit.hexsha


def dirty_paths(repo: git.Repo) -> list:
    """Modified, staged, deleted and untracked (not ignored) paths, as `git status` names them."""
    status = repo.git.status("--porcelain", "--untracked-files=all")
    return sorted(line[3:] for line in status.splitlines() if line.strip())


def require_clean(repo: git.Repo) -> None:
    """ValueError listing the dirty paths: what is frozen or measured must be a commit."""
    dirty = dirty_paths(repo)
    if dirty:
        listed = ", ".join(dirty[:20]) + (f" (and {len(dirty) - 20} more)" if len(dirty) > 20 else "")
        raise ValueError(f"{repo_root(repo)} has uncommitted changes: {listed}")


def resolve(repo: git.Repo, ref: str) -> str:
    """The full sha a ref (tag, branch, sha) names; ValueError if it names no commit."""
    try:
        return repo.commit(ref).hexsha
    except (git.BadName, ValueError, git.GitCommandError) as error:
        raise ValueError(f"{ref!r} names no commit in {repo_root(repo)}") from error


def tag_exists(repo: git.Repo, name: str) -> bool:
    return name in {tag.name for tag in repo.tags}


def create_tag(repo: git.Repo, name: str, commit: str) -> None:
    """A lightweight tag on `commit`; ValueError if it exists or git rejects the name."""
    if tag_exists(repo, name):
        raise ValueError(f"tag {name!r} already exists (at {repo.tags[name].commit.hexsha[:12]})")
    try:
        repo.git.check_ref_format(f"refs/tags/{name}")
    except git.GitCommandError as error:
        raise ValueError(f"{name!r} is not a valid tag name") from error
    repo.create_tag(name, ref=commit)


def delete_tag(repo: git.Repo, name: str) -> None:
    repo.delete_tag(repo.tags[name])


def commit_paths(repo: git.Repo, paths, message: str) -> str:
    """Commit exactly `paths` (whatever else is staged stays out); the new sha."""
    paths = [str(p) for p in paths]
    repo.git.add("--", *paths)
    repo.git.commit("-m", message, "--only", "--", *paths)
    return current_commit(repo)


def worktree_at(repo: git.Repo, commit: str, path) -> Path:
    """A detached worktree of `commit` at `path`: added, or reused when it already is one of
    this repository's worktrees (moved to `commit` if elsewhere). A reused worktree must be
    clean, since what it measures must be exactly the commit."""
    path = Path(path).resolve()
    commit = resolve(repo, commit)
    with _WORKTREE_LOCK:
        return _detached_worktree(repo, commit, path)


def _detached_worktree(repo: git.Repo, commit: str, path: Path) -> Path:
    repo.git.worktree("prune")  # forget worktrees whose folder was deleted by hand
    if path.exists() and path in _worktree_paths(repo):
        tree = git.Repo(path)
        require_clean(tree)
        if current_commit(tree) != commit:
            tree.git.checkout("--detach", commit)
        return path
    if path.exists() and any(path.iterdir()):
        raise ValueError(f"{path} exists and is not a worktree of {repo_root(repo)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    repo.git.worktree("add", "--detach", str(path), commit)
    return path


def _worktree_paths(repo: git.Repo) -> set:
    listing = repo.git.worktree("list", "--porcelain")
    return {Path(line[len("worktree "):]).resolve() for line in listing.splitlines()
            if line.startswith("worktree ")}


def branch_worktree(repo: git.Repo, branch: str, path, start: str) -> Path:
    """A worktree at `path` on `branch` (created at `start` if new); an existing one is reused
    as it is (a resumed run keeps the agent's commits and edits)."""
    path = Path(path).resolve()
    with _WORKTREE_LOCK:
        return _branch_worktree(repo, branch, path, start)


def _branch_worktree(repo: git.Repo, branch: str, path: Path, start: str) -> Path:
    repo.git.worktree("prune")
    if path.exists() and path in _worktree_paths(repo):
        return path
    if path.exists() and any(path.iterdir()):
        raise ValueError(f"{path} exists and is not a worktree of {repo_root(repo)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if branch in {head.name for head in repo.heads}:
        repo.git.worktree("add", str(path), branch)
    else:
        repo.git.worktree("add", "-b", branch, str(path), resolve(repo, start))
    return path


def commits_since(tree, base: str) -> list:
    """[{sha, subject, body}] of the commits on `tree`'s HEAD after `base`, oldest first."""
    repo = open_repo(tree)
    return [{"sha": c.hexsha, "subject": c.summary, "body": c.message}
            for c in reversed(list(repo.iter_commits(f"{base}..HEAD")))]


def changed_paths(tree, base: str) -> list:
    """Paths that differ from `base` in `tree`: committed, staged, unstaged or untracked."""
    repo = open_repo(tree)
    changed = repo.git.diff("--name-only", base).split()
    untracked = repo.git.ls_files("--others", "--exclude-standard").split()
    return sorted(set(changed) | set(untracked))


def files_at(tree, commit: str) -> set:
    """Every file path in `commit`."""
    return set(open_repo(tree).git.ls_tree("-r", "--name-only", commit).split("\n"))


def replace_refs(tree) -> list:
    """The `git replace` refs of the repository holding `tree` (shared by all its worktrees)."""
    return open_repo(tree).git.for_each_ref("--format=%(refname)", "refs/replace/").split()
