"""Git workspaces: the one harness module that runs git (through GitPython).

Repo root and current commit, a clean-tree guard, tags, ref resolution, committing named
paths only, and detached worktrees at a commit (the frozen baseline is measured from one,
under `.worktrees/`, which .gitignore hides so it never makes the main tree dirty). Agents
work in clones of their own, which the harness reads only from outside (TreeView): git run
inside a repository runs that repository's config, and an agent can write its clone's. Every
git failure a person can cause (unknown ref, existing tag, dirty tree) is a ValueError.
"""
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

import git

WORKTREES_DIR = ".worktrees"
# git's worktree bookkeeping (.git/worktrees, its lock files) does not take two `worktree add`
# at once, and threads sharing one Repo were seen to hang in concurrent git calls: the two
# agents' threads create their worktrees and clones one after the other.
_WORKTREE_LOCK = threading.Lock()


# Every harness-side git command runs with hooks off (a hook planted in a worktree by an
# agent must not run with the harness's rights, or rewrite what the harness commits) and
# reads objects as they are (`git replace` must not make a commit read as another).
HARNESS_GIT_ENV = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": "/dev/null",
                   "GIT_NO_REPLACE_OBJECTS": "1"}


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


def agent_clone(repo: git.Repo, branch: str, path, start: str) -> Path:
    """An agent's own repository at `path`, on `branch` made at `start`: a clone that borrows
    this repository's objects read-only (--shared) and has its own refs, config and hooks, so
    nothing the agent's confined commands write there (a config that runs a command, a moved
    tag, an object file rewritten in place) reaches the harness's git directory. An existing
    clone is reused as it is (a resumed run keeps the agent's commits and edits)."""
    path = Path(path).resolve()
    if (path / ".git").is_dir():
        return path
    if path.exists() and any(path.iterdir()):
        raise ValueError(f"{path} exists and is not an agent's clone")
    with _WORKTREE_LOCK:
        start = resolve(repo, start)
        path.parent.mkdir(parents=True, exist_ok=True)
        repo.git.clone("--quiet", "--shared", "--no-checkout", repo.common_dir, str(path))
    clone = git.Repo(path)  # made just now by the harness: its config is git's own
    clone.git.update_environment(**HARNESS_GIT_ENV)
    clone.git.checkout("--quiet", "-b", branch, start)
    reader = repo.config_reader()
    with clone.config_writer() as writer:  # the harness's identity for the agent's commits
        for key in ("name", "email"):
            if reader.has_option("user", key):
                writer.set_value("user", key, reader.get_value("user", key))
    return path


def fetch_head(repo: git.Repo, tree, ref: str) -> str:
    """The commit at `tree`'s HEAD, fetched into `repo` as `ref`: git reads the tree's
    repository through upload-pack, which runs nothing of that repository's config."""
    try:
        repo.git.fetch("--quiet", "--no-tags", "--force", "--update-head-ok", str(tree), f"+HEAD:{ref}")
    except git.GitCommandError as error:
        raise ValueError(f"{tree}: its HEAD cannot be read: {error.stderr.strip()}") from error
    return repo.commit(ref).hexsha


class TreeView:
    """A tree read from outside: its HEAD fetched into a scratch repository of the harness's
    (upload-pack reads the tree's repository and runs nothing of its config), and its files
    compared there through a temporary index. So a tree whose git directory an agent could
    write (an fsmonitor, a filter driver, a pager in its config) is read without running any
    of it, which a git command inside the tree would do."""

    def __init__(self, scratch: Path, tree: Path):
        self.tree, self._scratch = tree, scratch
        self.repo = git.Repo.init(scratch / "view.git", bare=True)
        self.repo.git.update_environment(**HARNESS_GIT_ENV)
        own = git_common_dir(Path(__file__))  # None in an exported copy of the harness
        if own is not None:  # fetch only what is new
            (scratch / "view.git" / "objects" / "info" / "alternates").write_text(f"{own / 'objects'}\n")
        self.head = fetch_head(self.repo, tree, "refs/view/head")

    def commits_since(self, base: str) -> list:
        """[{sha, subject, body}] of the commits after `base` up to the tree's HEAD, oldest first."""
        return [{"sha": c.hexsha, "subject": c.summary, "body": c.message}
                for c in reversed(list(self.repo.iter_commits(f"{base}..{self.head}")))]

    def differing_paths(self, commit: str) -> list:
        """Paths that differ from `commit` in the tree: changed by the commits since it, or edited,
        deleted or untracked (not ignored) against the tree's HEAD."""
        committed = self.repo.git.diff("--name-only", "--no-renames", commit, self.head).splitlines()
        env = {"GIT_INDEX_FILE": str(self._scratch / "index"), "GIT_WORK_TREE": str(self.tree)}
        self.repo.git.read_tree(self.head, env=env)  # the HEAD's files as the index: what is not committed
        status = self.repo.git.status("--porcelain", "--untracked-files=all", "--no-renames", env=env)
        edited = {line[3:] for line in status.splitlines() if line[1:2].strip()}  # the work tree's column
        return sorted(set(committed) | edited)

    def files_at(self, commit: str) -> set:
        return set(self.repo.git.ls_tree("-r", "--name-only", commit).split("\n"))

    def tag(self, name: str) -> str | None:
        """The commit the tree's repository's tag `name` names, or None without one."""
        listing = self.repo.git.ls_remote("--tags", str(self.tree), f"refs/tags/{name}")
        shas = dict(reversed(line.split()) for line in listing.splitlines() if line.strip())
        return shas.get(f"refs/tags/{name}^{{}}") or shas.get(f"refs/tags/{name}")

    def replace_refs(self) -> list:
        """The tree's repository's `git replace` refs, as it advertises them."""
        listing = self.repo.git.ls_remote(str(self.tree), "refs/replace/*")
        return [line.split()[1] for line in listing.splitlines() if line.strip()]


@contextmanager
def read_from_outside(tree):
    """A TreeView of `tree`, its scratch repository removed after."""
    with tempfile.TemporaryDirectory(prefix="bitwise-view-") as scratch:
        yield TreeView(Path(scratch), Path(tree).resolve())
