"""run.json of a `harness run`: what was asked, the commit judged and each stage's status,
written atomically after every change, so a resumed run skips what finished and refuses one
started with other options or on another commit (unless told to go on, which is recorded).
"""
import json
import os
import sys
import threading
import time
from pathlib import Path

from harness.workspace import current_commit, open_repo

ROOT = Path(__file__).resolve().parents[2]


class RunState:
    """run.json: what was asked and each stage's status; written atomically after each change."""

    def __init__(self, out: Path, asked: dict, allow_new_commit: bool = False):
        self.out, self.path = out, out / "run.json"
        self._lock = threading.RLock()
        if self.path.exists():
            self.data = json.loads(self.path.read_text())
            recorded = {k: self.data.get(k) for k in asked}
            if recorded != asked:
                raise ValueError(f"{self.path}: this run was started with {recorded}, not {asked}; "
                                 "resume it with the same options or choose another --out")
            head = current_commit(open_repo(ROOT))
            if self.data.get("commit") not in (None, head):
                if not allow_new_commit:
                    raise ValueError(f"{self.path}: this run judged commit {self.data['commit'][:12]}, HEAD is now "
                                     f"{head[:12]}; check it out, choose another --out, or pass "
                                     "--allow-new-commit (recorded in run.json)")
                self.data.setdefault("resumed_on_commits", []).append(head)
        else:
            self.data = {**asked, "commit": current_commit(open_repo(ROOT)), "argv": sys.argv[1:],
                         "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "stages": {}}
        self.save()

    def status(self, stage: str):
        return self.data["stages"].get(stage, {}).get("status")

    def mark(self, stage: str, status: str, detail: str = "") -> None:
        with self._lock:  # the two agents' threads mark their stages concurrently
            self.data["stages"][stage] = {"status": status, "detail": detail,
                                          "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
            self.save()

    def run_stage(self, name: str, body) -> None:
        """Run one stage unless run.json says it finished; a ValueError marks it failed with why."""
        if self.status(name) in ("done", "failed", "skipped"):
            print(f"[{name}] {self.status(name)} already (resumed)", flush=True)
            return
        print(f"[{name}] ...", flush=True)
        self.mark(name, "running")
        try:
            status, detail = body()
        except ValueError as error:
            status, detail = "failed", str(error)
        except KeyboardInterrupt:
            self.mark(name, "interrupted", "Ctrl-C; a resume runs it again")
            raise
        self.mark(name, status, detail)
        print(f"[{name}] {status}{': ' + detail if detail else ''}", flush=True)

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".json.partial")
        partial.write_text(json.dumps(self.data, indent=2))  # stages stay in the order they ran
        os.replace(partial, self.path)

    def gates_with(self, status: str) -> list:
        """The gates whose RUN/gates/C<NN>.json has this status, sorted."""
        return sorted(p.stem for p in (self.out / "gates").glob("C*.json")
                      if json.loads(p.read_text())["status"] == status)
