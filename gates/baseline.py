"""The frozen baseline as the gates check it (C00, C10): one record per device target
(baseline/frozen.json for the CPU, baseline/frozen-cuda.json for CUDA: a fast path is tuned and
frozen on the device it is judged on) names a commit, the content hash of what the fast path runs
there (the fast contract's numerical_policy identity) and files_hash over every file of kernels/
and gates/ (what C10 exports and runs; the identity leaves out the engine's bookkeeping).
Another commit's hashes are recomputed, never trusted: `git archive` exports its kernels/ and
gates/, and a subprocess whose cwd is that folder imports *those* kernels: the gate's cannot leak in.
"""
import json
import subprocess
import sys
import tempfile
from hashlib import sha256
from pathlib import Path

from gates.git_objects import export_commit, run_git
from gates.switches import switch


def judged_tree() -> Path:
    """The tree whose kernels/ run: an agent's worktree when the harness judges it from its
    pristine copy (BITWISE_TREE, harness/pristine.py), else this checkout."""
    return Path(switch("BITWISE_TREE") or Path(__file__).resolve().parent.parent)


ROOT = judged_tree()
FROZEN_PATH = "baseline/frozen.json"  # the CPU record
NO_BASELINE = "no frozen baseline: run harness freeze-baseline"
HASH_OF = "numerical_policy of the fast contract"

# Run with cwd = the tree: sys.path[0] is '' so `kernels` is that tree's; it says where it
# imported kernels from, so a caller can refuse a hash taken from the wrong tree.
_HASH_PROGRAM = (
    "import json, kernels\n"
    "from kernels.contract import load_contract\n"
    "from kernels.contract.identity import numerical_policy_identity\n"
    "print(json.dumps({'content_hash': numerical_policy_identity(load_contract('fast')),"
    " 'kernels': kernels.__file__}))\n"
)


def _ask_tree(tree, program: str, what: str) -> dict:
    """The JSON `program` prints, run with cwd = `tree` (so `kernels` is that tree's); refused
    if it imported kernels from anywhere else."""
    tree = Path(tree).resolve()
    result = subprocess.run([sys.executable, "-c", program], cwd=tree, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{what} in {tree} failed: {result.stderr[-2000:]}")
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    if not Path(answer["kernels"]).resolve().is_relative_to(tree):
        raise RuntimeError(f"{what} in {tree} imported kernels from {answer['kernels']}")
    return answer


def tree_content_hash(tree) -> str:
    """The content hash of the fast path in the source tree at `tree` (its kernels/)."""
    return _ask_tree(tree, _HASH_PROGRAM, "hashing the fast path")["content_hash"]


_MODELS_PROGRAM = ("import json, kernels\n"
                   "from kernels.models.registry import MODEL_CONFIGS\n"
                   "print(json.dumps({'models': sorted(MODEL_CONFIGS), 'kernels': kernels.__file__}))\n")


def tree_models(tree) -> list:
    """The model names (`--model`) the source tree at `tree` ships, read from its own registry."""
    return _ask_tree(tree, _MODELS_PROGRAM, "reading the models")["models"]


RUN_PATHS = ("kernels", "gates")  # what C10 exports of the frozen commit and runs
FILES_HASH_OF = "every file of kernels/ and gates/ at the commit (what C10 runs)"


def files_hash(tree, paths=RUN_PATHS) -> str:
    """sha256 over every file under `paths` of `tree`, in path order: each path's and each
    content's length, then the bytes (so no two trees share a stream)."""
    digest, tree = sha256(), Path(tree)
    for path in sorted(p for name in paths for p in (tree / name).rglob("*") if p.is_file()):
        name, data = path.relative_to(tree).as_posix().encode(), path.read_bytes()
        digest.update(len(name).to_bytes(8, "big") + name + len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def commit_hashes(commit: str, root: Path = ROOT) -> tuple:
    """(content hash, files_hash) of `commit`, from one export of its own files (git archive)."""
    with tempfile.TemporaryDirectory(prefix="frozen-") as folder:
        tree = export_commit(commit, folder, root, RUN_PATHS)
        return tree_content_hash(tree), files_hash(tree)


def frozen_path(target: str = "cpu") -> str:
    """Where the record for a device target lives, relative to the repository root."""
    return FROZEN_PATH if target == "cpu" else f"baseline/frozen-{target}.json"


def no_baseline(target: str = "cpu") -> str:
    return (NO_BASELINE if target == "cpu"
            else f"no frozen {target} baseline: run harness freeze-baseline --device {target}")


def read_frozen(root: Path = ROOT, target: str = "cpu"):
    """The target's frozen record ({tag, commit, content_hash, files_hash, frozen_at, hash_of[, device]})
    or None."""
    path = Path(root) / frozen_path(target)
    return json.loads(path.read_text()) if path.exists() else None


def verify_frozen(root: Path = ROOT, target: str = "cpu") -> tuple:
    """(problems, figures) for the target's record: problems is empty when the record's commit
    exists, the fast path at that commit hashes to the recorded content hash, and the tag, if
    present here, points at that commit. figures are what was read and recomputed."""
    record = read_frozen(root, target)
    if record is None:
        return [no_baseline(target)], {"frozen_path": frozen_path(target)}
    figures = {"frozen": record, "frozen_path": frozen_path(target)}
    missing = [k for k in ("tag", "commit", "content_hash") if not record.get(k)]
    if missing:
        return [f"{frozen_path(target)} lacks {missing}"], figures
    commit = record["commit"]
    if run_git(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        return [f"frozen commit {commit} does not exist in this repository"], figures
    figures["recomputed_content_hash"], files = commit_hashes(commit, root)
    problems = []
    if figures["recomputed_content_hash"] != record["content_hash"]:
        problems.append(f"the fast path at {commit[:12]} hashes to "
                        f"{figures['recomputed_content_hash'][:16]}..., not the recorded "
                        f"{record['content_hash'][:16]}...")
    if record.get("files_hash"):
        figures["recomputed_files_hash"] = files
        if figures["recomputed_files_hash"] != record["files_hash"]:
            problems.append(f"kernels/ and gates/ at {commit[:12]} hash to {figures['recomputed_files_hash'][:16]}..., "
                            f"not the recorded files_hash {record['files_hash'][:16]}...")
    else:
        figures["files_hash"] = "not recorded: the record predates it (its content hash covers the policy sources)"
    tag = run_git(root, "rev-parse", "--verify", "--quiet", f"refs/tags/{record['tag']}^{{commit}}")
    figures["tag_commit"] = tag.stdout.strip() or None  # tags need not travel with a clone
    if figures["tag_commit"] and figures["tag_commit"] != commit:
        problems.append(f"tag {record['tag']} points at {figures['tag_commit'][:12]}, "
                        f"not the frozen commit {commit[:12]}")
    return problems, figures
