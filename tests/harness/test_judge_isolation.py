"""What a verdict on an agent's work is about, and what the judge imports: a fresh checkout
of the agent's last commit (no uncommitted edits, no forged or committed bytecode), git's
objects as they are (`git replace` is named and ignored), and only the tree's `kernels` on
the judge's path (a planted `pytest/` cannot shadow the judge's); a verdict rewritten by an
exit hook after the gate sent it is caught."""
import json
import subprocess
import sys

from harness.cli import main
from harness.exit_codes import EXIT_DIFFERENT
from harness.pristine import Isolation
from harness.stages import agents as agents_stage
from harness.workspace import agent_clone, open_repo
from tests.harness.test_agents_stage import _repo


def _commit(repo, message, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", *args, "-m", message],
                   cwd=repo, check=True, capture_output=True)


def _agent_on_a_kernel(tmp_path, ignore: str = "") -> tuple:
    """(the harness's repo, its base commit, an agent's clone of it): one kernels/op.py."""
    root = _repo(tmp_path)
    if ignore:
        (root / ".gitignore").write_text(ignore)
    (root / "kernels").mkdir()
    (root / "kernels" / "op.py").write_text("SCALE = 1.0\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    _commit(root, "base")
    repo = open_repo(root)
    base = repo.head.commit.hexsha
    return repo, base, agent_clone(repo, "bitwise/r/consistent", tmp_path / "trees" / "r-consistent", base)


def test_the_verdict_judges_a_fresh_checkout_of_the_last_commit(tmp_path):
    """Uncommitted edits and a forged (git-ignored) __pycache__ in the agent's worktree are not
    in the judged tree; bytecode that came with a commit is removed there and named by the scan."""
    from harness.tamper import scan
    repo, base, worktree = _agent_on_a_kernel(tmp_path, ignore="__pycache__/\n")
    (worktree / "kernels" / "op.py").write_text("SCALE = 2.0  # committed fix\n")
    _commit(worktree, "fix", "-a")
    (worktree / "kernels" / "op.py").write_text("SCALE = 3.0  # uncommitted\n")
    (worktree / "kernels" / "__pycache__").mkdir()
    (worktree / "kernels" / "__pycache__" / "op.cpython-312.pyc").write_bytes(b"forged")
    judged = agents_stage._judged_checkout(repo, worktree, "r-consistent")
    assert (judged / "kernels" / "op.py").read_text() == "SCALE = 2.0  # committed fix\n"
    assert not (judged / "kernels" / "__pycache__").exists()
    assert scan(worktree, base, None) == []  # ignored bytecode is not the agent's change
    subprocess.run(["git", "add", "-f", "kernels/__pycache__/op.cpython-312.pyc"], cwd=worktree, check=True)
    _commit(worktree, "cache")
    judged = agents_stage._judged_checkout(repo, worktree, "r-consistent")
    assert not (judged / "kernels" / "__pycache__").exists()
    assert any("compiled bytecode" in v and "op.cpython-312.pyc" in v for v in scan(worktree, base, None))


def test_git_replace_is_a_tamper_violation_and_the_judge_reads_true_objects(tmp_path):
    """`git replace` of the base's op.py blob makes plain git show the cheat; the judge's
    export and the scan do not take it."""
    from gates.git_objects import export_commit
    from harness.tamper import scan
    root = _repo(tmp_path)
    (root / "kernels").mkdir()
    (root / "kernels" / "op.py").write_text("SCALE = 1.0\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    _commit(root, "base")
    base = open_repo(root).head.commit.hexsha
    assert scan(root, base, None) == []
    blob = subprocess.run(["git", "rev-parse", f"{base}:kernels/op.py"], cwd=root, capture_output=True,
                          text=True, check=True).stdout.strip()
    forged = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=root, input="SCALE = 9.0\n",
                            capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run(["git", "replace", blob, forged], cwd=root, check=True)
    shown = subprocess.run(["git", "show", f"{base}:kernels/op.py"], cwd=root, capture_output=True, text=True)
    assert shown.stdout == "SCALE = 9.0\n"  # the control: the replacement is in effect for plain git
    exported = export_commit(base, tmp_path / "export", root)
    assert (exported / "kernels" / "op.py").read_text() == "SCALE = 1.0\n"
    assert any("git replace" in v for v in scan(root, base, None))


def test_the_judged_tree_cannot_shadow_the_judges_imports(tmp_path):
    """A `pytest/` and a `sitecustomize/` package at the judged tree's root: a judge process
    imports pytest from the environment and the tree's kernels, and nothing of the rest. The
    control: the tree itself on PYTHONPATH (as before) lets the planted pytest win."""
    tree, apparatus = tmp_path / "tree", tmp_path / "run" / "apparatus"
    for package in ("kernels", "pytest", "sitecustomize"):
        (tree / package).mkdir(parents=True)
        (tree / package / "__init__.py").write_text(f"PLANTED = {package!r}\n")
    apparatus.mkdir(parents=True)
    isolation = Isolation(tree, apparatus, "HEAD", tmp_path / "tamper.json")
    probe = ("import kernels, pytest, sys; print(kernels.PLANTED, hasattr(pytest, 'PLANTED'), "
             "'sitecustomize' in sys.modules and hasattr(sys.modules['sitecustomize'], 'PLANTED'))")
    judged = subprocess.run([sys.executable, "-c", probe], cwd=apparatus, env=isolation.env(), capture_output=True,
                            text=True, check=True).stdout.split()
    assert judged == ["kernels", "False", "False"], judged
    shadowed = subprocess.run([sys.executable, "-c", probe], cwd=apparatus, capture_output=True, text=True,
                              env={**isolation.env(), "PYTHONPATH": f"{apparatus}:{tree}"}, check=True).stdout.split()
    assert shadowed == ["kernels", "True", "True"], shadowed


def test_a_new_start_up_file_in_the_interpreters_site_folder_is_a_violation(tmp_path, monkeypatch):
    """A .pth a shell command writes into site-packages (outside every worktree) runs in every
    judge process: the scan at the verdicts compares with the files recorded at the start."""
    from harness import tamper
    site_dir, tree = tmp_path / "site-packages", _repo(tmp_path)
    site_dir.mkdir()
    (site_dir / "distutils-precedence.pth").write_text("import os\n")
    monkeypatch.setattr(tamper.site, "getsitepackages", lambda: [str(site_dir)])
    monkeypatch.setattr(tamper.site, "getusersitepackages", lambda: str(tmp_path / "no-user-site"))
    at_start = tamper.startup_files()
    base = open_repo(tree).head.commit.hexsha
    assert tamper.scan(tree, base, None, at_start) == []
    (site_dir / "zz-judge-hook.pth").write_text("import kernels_hook\n")
    (site_dir / "distutils-precedence.pth").write_text("import os; os.environ['X'] = '1'\n")
    violations = tamper.scan(tree, base, None, at_start)
    assert [v.rsplit("/", 1)[-1] for v in violations] == ["distutils-precedence.pth", "zz-judge-hook.pth"], violations



def test_an_edited_judge_copy_is_refused(tmp_path):
    """The apparatus as exported passes; one edit of a gate, a planted bytecode file or a new
    conftest in it makes the next gate run refuse to judge; a fresh export passes again."""
    import shutil

    import pytest

    from harness.pristine import export_apparatus
    base = open_repo(".").head.commit.hexsha

    def planted(edit):
        apparatus = tmp_path / "run" / "apparatus"
        shutil.rmtree(apparatus, ignore_errors=True)
        isolation = Isolation(tmp_path / "tree", export_apparatus(base, apparatus), base, tmp_path / "tamper.json")
        isolation.require_pristine()
        edit(apparatus)
        return isolation
    gate = "gates/test_c07_end_to_end.py"
    edits = (lambda a: (a / gate).write_text((a / gate).read_text().replace("def test_", "def _skipped_", 1)),
             lambda a: (a / "gates" / "__pycache__").mkdir() or
             (a / "gates" / "__pycache__" / "compare.cpython-312.pyc").write_bytes(b"forged"),
             lambda a: (a / "conftest.py").write_text("collect_ignore_glob = ['*']\n"))
    for edit in edits:
        with pytest.raises(ValueError, match="TAMPERING: the judge's copy"):
            planted(edit).require_pristine()
    planted(lambda a: None).require_pristine()


REWRITE_AT_EXIT = """
import atexit, glob, json, sys

def _forge():
    if "--gate-out" in sys.argv:
        for path in glob.glob(sys.argv[sys.argv.index("--gate-out") + 1] + "/C*.json"):
            with open(path) as f:
                document = json.load(f)
            document["status"] = "pass"
            for condition in document["conditions"]:
                condition["status"] = "pass"
            with open(path, "w") as f:
                json.dump(document, f)

atexit.register(_forge)
"""


def test_an_exit_hook_that_rewrites_the_verdict_is_caught(tmp_path, monkeypatch, capsys):
    """Code that runs in the gate process (here a sitecustomize on its path, as a hook in the
    judged kernels would) rewrites C07's failing JSON to a pass at exit; the harness keeps the
    document the gate sent down its pipe before that, fails the gate and names the tampering."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(REWRITE_AT_EXIT)
    monkeypatch.setenv("PYTHONPATH", str(hooks))
    out = tmp_path / "out"
    assert main(["gates", "--model", "qwen3", "--only", "C7", "--contract", "fast",
                 "--out", str(out)]) == EXIT_DIFFERENT
    assert "TAMPERING: C07.json: the verdict file changed after the gate process sent it" in capsys.readouterr().out
    kept = json.loads((out / "C07.json").read_text())
    assert kept["status"] == "fail"
    failed = {c["name"] for c in kept["conditions"] if c["status"] == "fail"}
    assert "the verdict file is the document the gate process sent" in failed
    assert len(failed) > 1, "the gate's own failed conditions are kept"


def test_the_harness_never_runs_the_config_of_an_agents_clone(tmp_path):
    """An agent can write its clone's git config: an fsmonitor and a filter driver there run
    with any git command inside the clone (the control shows it), but the harness reads the
    clone from outside (harness/workspace.py TreeView), so the scan, the judged checkout and
    the uncommitted check run none of it."""
    from harness.tamper import scan
    from harness.workspace import read_from_outside
    repo, base, clone = _agent_on_a_kernel(tmp_path)
    marker = tmp_path / "ran-agent-config"
    for key, value in (("core.fsmonitor", f"touch {marker}-fsmonitor; false #"),
                       ("filter.evil.clean", f"touch {marker}-clean; cat"),
                       ("filter.evil.smudge", f"touch {marker}-smudge; cat")):
        subprocess.run(["git", "config", key, value], cwd=clone, check=True)
    (clone / ".gitattributes").write_text("* filter=evil\n")
    (clone / "kernels" / "op.py").write_text("SCALE = 2.0\n")
    subprocess.run(["git", "-c", "core.fsmonitor=false", "add", "-A"], cwd=clone, check=True)
    _commit(clone, "fix")
    for leftover in tmp_path.glob("ran-agent-config*"):
        leftover.unlink()  # the agent's own git commands ran its filter: that is its business
    (clone / "kernels" / "op.py").write_text("SCALE = 3.0  # uncommitted\n")
    assert scan(clone, base, None) == []
    with read_from_outside(clone) as view:
        assert view.differing_paths(view.head) == ["kernels/op.py"]
        assert set(view.differing_paths(base)) == {".gitattributes", "kernels/op.py"}
    judged = agents_stage._judged_checkout(repo, clone, "r-consistent")
    assert (judged / "kernels" / "op.py").read_text() == "SCALE = 2.0\n"
    assert not list(tmp_path.glob("ran-agent-config*")), "the harness ran a command from the agent's git config"
    subprocess.run(["git", "status", "--porcelain"], cwd=clone, check=True, capture_output=True)
    assert list(tmp_path.glob("ran-agent-config*")), "control: git inside the clone runs its config"


def test_the_baseline_agents_commit_is_frozen_on_a_checkout_the_harness_makes(tmp_path):
    """The baseline agent's branch in the harness's repository is set to the clone's HEAD and
    checked out there (where the frozen record is committed); a resumed run makes it again."""
    repo, base, clone = _agent_on_a_kernel(tmp_path)
    (clone / "kernels" / "op.py").write_text("SCALE = 4.0  # faster\n")
    _commit(clone, "faster", "-a")
    head = open_repo(clone).head.commit.hexsha
    path = tmp_path / "frozen"
    for _ in range(2):  # the second time as a resumed run would
        checkout = agents_stage._branch_checkout(repo, clone, "bitwise/r/baseline", path)
        assert open_repo(checkout).head.commit.hexsha == head == repo.commit("bitwise/r/baseline").hexsha
        assert (checkout / "kernels" / "op.py").read_text() == "SCALE = 4.0  # faster\n"
