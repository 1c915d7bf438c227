"""`harness freeze-baseline [--tag NAME] [--device cpu|cuda]`: freeze the fast path as the
performance baseline of a device target.
Refuses a dirty tree (what is frozen must be a commit). Tags HEAD, then commits only the target's
record (baseline/frozen.json for the CPU, baseline/frozen-cuda.json for CUDA) = {tag, commit,
content_hash, files_hash, files_hash_of, frozen_at, hash_of, device}, both hashes computed from
the commit's own files as C00 recomputes them (gates/baseline.py). The record is committed, not
just tagged, because tags need not travel with a clone while the commit sha does.
"""
import json
import time
from pathlib import Path

from gates.baseline import FILES_HASH_OF, HASH_OF, commit_hashes, frozen_path
from gates.device import DEVICES
from harness import workspace
from harness.exit_codes import EXIT_OK


def freeze(repo_path=".", tag: str | None = None, target: str = "cpu") -> dict:
    """Tag HEAD as the target's frozen baseline and commit its record; the record."""
    if target not in DEVICES:
        raise ValueError(f"--device: {target!r} is not one of {DEVICES}")
    repo = workspace.open_repo(repo_path)
    root = workspace.repo_root(repo)
    workspace.require_clean(repo)
    tag = tag or time.strftime("baseline-%Y%m%d-%H%M%S")
    if workspace.tag_exists(repo, tag):
        raise ValueError(f"tag {tag!r} already exists: choose another --tag")
    commit = workspace.current_commit(repo)
    content_hash, files_hash = commit_hashes(commit, root)
    record = {"tag": tag, "commit": commit, "content_hash": content_hash,
              "files_hash": files_hash, "files_hash_of": FILES_HASH_OF,
              "frozen_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "hash_of": HASH_OF, "device": target}
    workspace.create_tag(repo, tag, commit)
    try:
        path = root / frozen_path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        workspace.commit_paths(repo, [Path(frozen_path(target))], f"baseline: freeze {tag} as the {target} baseline")
    except Exception:
        workspace.delete_tag(repo, tag)  # no tag without the record that explains it
        raise
    return record


def add_arguments(parser) -> None:
    parser.add_argument("--tag", help="tag name (default baseline-<YYYYMMDD-HHMMSS>)")
    parser.add_argument("--device", default="cpu", choices=DEVICES,
                        help="the device target whose baseline this is (C10 times against it there)")


def run(args) -> int:
    record = freeze(".", args.tag, args.device)
    print(f"froze {record['tag']} at {record['commit'][:12]} as the {args.device} baseline\n"
          f"content hash ({record['hash_of']}): {record['content_hash']}\n"
          f"recorded in {frozen_path(args.device)} (committed)")
    return EXIT_OK
