"""`harness run --agent anthropic|claude-code`: two agents at once, each in its own clone.
The baseline and the consistent agent each get a clone (objects shared read-only, branch
bitwise/<run>/<role>, under .worktrees/), a budget, a transcript and the harness tools
(harness/agent_roles.py); the harness never runs git in their clones but reads them from outside
(harness/workspace.py), and checks the frozen record before every gate run against its start copy.
When an agent stops, the baseline's last commit is frozen for review (agents/baseline/review.md);
the consistent one's is revalidated by every gate from the pristine copy after a tamper scan.
run.json marks each agent's stage: resumed (same --out), an unfinished agent goes on in its clone.
"""
import json
import shutil
import threading
import traceback
from pathlib import Path

from gates.baseline import read_frozen
from harness import agent_roles
from harness.agents.base import AgentLimits, AgentTask
from harness.pristine import Isolation, export_apparatus
from harness.secrets import redact
from harness.stages import freeze as freeze_stage
from harness.stages import gates as gates_stage
from harness.tamper import startup_files, write_report
from harness.territory import TERRITORIES
from harness.workspace import (
    WORKTREES_DIR,
    agent_clone,
    fetch_head,
    open_repo,
    read_from_outside,
    repo_root,
    worktree_at,
)

ROLES = ("baseline", "consistent")


def _kept_from_the_start(path: Path, compute):
    """compute() as it was when the run started: written to `path` in the run directory the
    first time, read back from it after (a resumed run keeps the first run's)."""
    if not path.exists():
        path.write_text(json.dumps({"record": compute()}, indent=2))
    return json.loads(path.read_text())["record"]


def _frozen_outside(state) -> dict | None:
    """The frozen baseline record as it was when the run started."""
    return _kept_from_the_start(state.out / "frozen_baseline.json", read_frozen)


def _startup_outside(state) -> dict:
    """The interpreter's start-up files as they were when the run started (harness/tamper.py)."""
    return _kept_from_the_start(state.out / "startup_files.json", startup_files)


def _brief(role: str, args, state, worktree: Path, base: str) -> str:
    brief = agent_roles.BRIEFS[role].format(model=args.model, contract=args.contract, rules=agent_roles.RULES,
                                            situation=agent_roles.situation(state.out),
                                            territory=TERRITORIES[role])
    with read_from_outside(worktree) as view:
        done = view.commits_since(base)
    if done:  # a resumed run: the conversation is new, the worktree is not
        brief += "\n\nThis run was interrupted and resumed. Your branch already has these commits:\n" + "\n".join(
            f"- {c['sha'][:12]} {c['subject']}" for c in done)
    return brief


def _after_baseline(role_dir: Path, worktree: Path, base: str, run_name: str, frozen_outside, startup) -> str:
    """Freeze the baseline agent's last commit on its branch (unless the tamper scan found
    something) and write the review note."""
    violations = write_report(role_dir / "tamper" / "after.json", worktree, base, frozen_outside, startup,
                              role="baseline")
    if violations:
        return f"not frozen; TAMPERING: {violations}"
    with read_from_outside(worktree) as view:
        commits, uncommitted = view.commits_since(base), view.differing_paths(view.head)
    if not commits:
        return "made no commit: the frozen baseline stays as it was"
    if uncommitted:
        return f"left uncommitted changes: not frozen ({uncommitted[:5]})"
    repo = open_repo(Path(__file__))  # frozen on the harness's own checkout of the commit: no git in the clone
    worktree = _branch_checkout(repo, worktree, f"bitwise/{run_name}/baseline",
                                repo_root(repo) / WORKTREES_DIR / f"{run_name}-baseline-frozen")
    frozen = freeze_stage.freeze(worktree, tag=f"baseline-{run_name}")
    (role_dir / "review.md").write_text(
        f"# Baseline for human review\n\nThe baseline agent's work is frozen as tag `{frozen['tag']}` at "
        f"`{frozen['commit']}` (content hash `{frozen['content_hash']}`) on its branch. It is NOT adopted: "
        "review the commits below (fast path still correct against the float64 references?) and merge "
        "the branch to make it the baseline.\n\n" + "\n".join(f"- `{c['sha'][:12]}` {c['subject']}" for c in commits))
    return f"frozen as {frozen['tag']} for human review"


def _branch_checkout(repo, clone: Path, branch: str, path: Path) -> Path:
    """A worktree of the harness's repository at `path`, on `branch` set to the clone's HEAD
    (made by the harness, its config the harness's): where the frozen record is committed."""
    if path.exists():  # a resumed run: made again from the clone's HEAD
        repo.git.worktree("remove", "--force", str(path))
    fetch_head(repo, clone, f"refs/heads/{branch}")
    repo.git.worktree("add", "--quiet", str(path), branch)
    return path


def _judged_checkout(repo, worktree: Path, name: str) -> Path:
    """A fresh detached worktree of the agent's last commit: the verdict is about the commit
    alone, not uncommitted edits or files git ignores (a forged __pycache__). A __pycache__
    that came with the commit is removed (the tamper scan names it)."""
    head = fetch_head(repo, worktree, f"refs/bitwise/judged/{name}")  # its objects, for the checkout
    judged = worktree_at(repo, head, repo_root(repo) / WORKTREES_DIR / f"{name}-judged")
    for cache in sorted(judged.rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache, ignore_errors=True)
    return judged


def _revalidate(role: str, role_dir: Path, worktree: Path, isolation: Isolation, args, frozen_outside,
                startup) -> str:
    """Every gate from the pristine copy against a clean checkout of the agent's last commit;
    the tamper scan reads the agent's own worktree (uncommitted files included)."""
    violations = write_report(isolation.tamper_report, worktree, isolation.base, frozen_outside, startup,
                              role=role)
    with read_from_outside(worktree) as view:
        uncommitted = view.differing_paths(view.head)
    statuses = gates_stage.run_gates(gates_stage.select(args.gates), model=args.model, contract=args.contract,
                                     out=role_dir / "revalidate", isolation=isolation)
    failed = [name for name, status in statuses.items() if status == "fail"]
    return (f"revalidated: {'all gates pass or n/a' if not failed else 'failed ' + ', '.join(failed)}"
            f" (commit {open_repo(isolation.tree).head.commit.hexsha[:12]})"
            + (f"; uncommitted changes not judged: {uncommitted[:5]}" if uncommitted else "")
            + (f"; TAMPERING: {violations}" if violations else ""))


def _run_role(role, backend, args, state, base, apparatus, frozen_outside) -> str:
    repo = open_repo(Path(__file__))  # the repository this harness belongs to
    run_name = state.out.name
    worktree = agent_clone(repo, f"bitwise/{run_name}/{role}", repo_root(repo) / WORKTREES_DIR / f"{run_name}-{role}",
                           base)
    role_dir = state.out / "agents" / role
    role_dir.mkdir(parents=True, exist_ok=True)

    def isolation_for(report: Path) -> Isolation:  # the tools judge the clone's last commit, checked out here
        return Isolation(_judged_checkout(repo, worktree, f"{run_name}-{role}"), apparatus, base, report)

    work_dir = worktree / "runs"  # git-ignored: what the harness hands the agent to read
    if (state.out / "repros").exists():
        shutil.copytree(state.out / "repros", work_dir / "repros", dirs_exist_ok=True)
    attempt = len(list(role_dir.glob("transcript-*.jsonl"))) + 1
    task = AgentTask(role=role, worktree=worktree, instructions=_brief(role, args, state, worktree, base),
                     model=args.agent_model or "",
                     limits=AgentLimits(max_turns=args.max_turns, max_cost_usd=args.max_cost_usd,
                                        max_wall_s=args.max_wall_s),
                     transcript_path=role_dir / f"transcript-{attempt}.jsonl",
                     extra_tools=agent_roles.harness_tools(role, role_dir, work_dir, isolation_for, args.model,
                                                           args.contract, frozen_outside))
    result = backend.run(task)
    startup = _startup_outside(state)
    after = (_after_baseline(role_dir, worktree, base, run_name, frozen_outside, startup) if role == "baseline" else
             _revalidate(role, role_dir, worktree, Isolation(_judged_checkout(repo, worktree, f"{run_name}-{role}"),
                                                       apparatus, base, role_dir / "tamper" / "revalidate.json"),
                         args, frozen_outside, startup))
    with read_from_outside(worktree) as view:
        (role_dir / "commits.json").write_text(redact(json.dumps(view.commits_since(base), indent=2)))
    (role_dir / "result.json").write_text(redact(json.dumps({
        "role": role, "status": result.status, "turns": result.turns, "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens, "cost_usd": result.cost_usd, "final_text": result.final_text,
        "transcript": str(result.transcript_path), "worktree": str(worktree), "branch": f"bitwise/{run_name}/{role}",
        "after": after}, indent=2)))
    # an agent that ended in error (API failure, CLI crash) is not done: a resume runs it again
    return ("error" if result.status == "error" else "done"), f"{result.status}; {after}"


def _role_stage(role, backend, args, state, base, apparatus, frozen_outside):
    """One agent's stage body: a crash (any exception, in the harness's own code too) marks
    the stage "crashed" with its error, traceback on stderr, so the other agent carries on
    and a resume runs this one again."""
    try:
        return _run_role(role, backend, args, state, base, apparatus, frozen_outside)
    except ValueError:
        raise  # run_stage marks it failed with why
    except Exception as error:
        traceback.print_exc()
        return "crashed", f"{type(error).__name__}: {error}"


def run_agents(state, args, backend):
    """Both agents in parallel threads; each one's stage in run.json ("agent:<role>"). The
    stage is done when both are; otherwise "incomplete", which a resume runs again (agents
    that are done are not re-run)."""
    base = state.data["commit"]
    frozen_outside = _frozen_outside(state)
    _startup_outside(state)  # recorded before either agent runs a command
    apparatus = export_apparatus(base, state.out / "apparatus")
    threads = [threading.Thread(target=state.run_stage, name=role, args=(
        f"agent:{role}", lambda role=role: _role_stage(role, backend, args, state, base, apparatus,
                                                       frozen_outside))) for role in ROLES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = {role: state.status(f"agent:{role}") for role in ROLES}
    return ("done" if set(statuses.values()) == {"done"} else "incomplete",
            "; ".join(f"{role}: {status}" for role, status in statuses.items()))


def consistent_result(run_dir: Path) -> dict | None:
    path = run_dir / "agents" / "consistent" / "result.json"
    return json.loads(path.read_text()) if path.exists() else None
