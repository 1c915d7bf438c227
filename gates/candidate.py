"""The judge's door to the code under test: `ask(procedure, arguments)` runs one procedure of
gates/procedures.py in a fresh worker process and returns its answer, read as JSON.
Why: a gate process that imported the candidate's modules could have its checks rewritten by
them; one that only reads JSON back writes verdicts no candidate code ran beside, and proves it
(`candidate_modules()` empty). Each ask is its own process on the judge's sys.path
(harness/pristine.py), confined (gates/confine.py) to its scratch folder, so the engine and
trainer sides share nothing but what the judge passes. On CUDA each `side` keeps its own writable
Triton cache; `confinement()` says what held. Workers asked together wait passively at OpenMP
barriers (OMP_WAIT_POLICY=PASSIVE unless set): spinning on their pools they starve each other on
a small CPU, while a worker alone that waits passively pays a futex wake at every small op.
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gates import confine, device
from gates.target import outside_target

JUDGE_ROOT = Path(__file__).resolve().parent.parent  # the judge's copy: its gates/ resolve first
PROGRAM = """
import json, sys
from gates.procedures import PROCEDURES, environment
arguments = json.loads(sys.stdin.read())
answer = {"answer": PROCEDURES[sys.argv[1]](arguments),
          "environment": environment(arguments) if sys.argv[3] == "report" else None}
with open(sys.argv[2], "w") as out:
    json.dump(answer, out)
"""
TOGETHER_ENVIRONMENT = {"OMP_WAIT_POLICY": "PASSIVE"}  # workers side by side; the caller's environment wins
reported_environment: dict | None = None  # the stack the last worker ran on (what a gate's JSON records)
_ANSWERED: dict = {}  # ask_once's answers, by procedure, arguments and judged tree


class WorkerFailed(RuntimeError):
    """A worker ended without an answer: its procedure, exit status and the end of its stderr."""


def ask(procedure: str, arguments: dict, *, writable=(), timeout: float | None = None, tree=None,
        loopback: bool = False, side: str = "", together: bool = False) -> dict:
    """procedure(arguments) computed in a new worker on the judged tree (or on `tree`'s
    kernels, e.g. an exported base commit): its JSON answer. `writable`: folders the
    procedure writes its files into, besides its own; `loopback`: its namespace's lo up and
    its own /dev/shm, for a procedure whose own processes talk over TCP or share memory
    (gates/confine.py; always for an outside target's subject); `side`: which Triton
    cache it writes on a GPU (the two sides of a comparison name different ones); `together`:
    other workers compute beside it (TOGETHER_ENVIRONMENT's defaults)."""
    global reported_environment
    # an outside stack's engine may take locks in shared memory (vLLM's does): its own /dev/shm
    outside = outside_target(arguments)
    loopback = loopback or outside is not None
    with tempfile.TemporaryDirectory(prefix="bitwise-ask-") as folder:
        answer_path = Path(folder) / "answer.json"
        report = "report" if reported_environment is None else "known"  # the stack, once a process
        command = [sys.executable, "-B", "-c", PROGRAM, procedure, str(answer_path), report]
        caches = _caches(side)
        stack_cache = _stack_cache(outside) if outside else None
        if confine.unavailable() is None:
            command = confine.argv_confined(shlex.join(command), [folder, *map(str, writable), *caches,
                                                                  *([str(stack_cache)] if stack_cache else [])],
                                            loopback=loopback)
        environment = dict((TOGETHER_ENVIRONMENT if together else {}) | dict(os.environ), TMPDIR=folder,
                           **({"PYTHONPATH": str(tree)} if tree is not None else {}),
                           **({"TRITON_CACHE_DIR": caches[0]} if caches else {}),
                           **({"TORCHINDUCTOR_CACHE_DIR": str(stack_cache / "inductor"),
                               "VLLM_CACHE_ROOT": str(stack_cache / "vllm")} if stack_cache else {}))
        done = subprocess.run(command, input=json.dumps(arguments), capture_output=True, text=True, cwd=JUDGE_ROOT,
                              env=environment, timeout=timeout)
        if done.returncode != 0 or not answer_path.exists():
            raise WorkerFailed(f"worker for {procedure!r} exited {done.returncode} without an answer: "
                               f"{done.stderr[-3000:]}")
        document = json.loads(answer_path.read_text())
    reported_environment = reported_environment or document["environment"]
    return document["answer"]


def ask_once(procedure: str, arguments: dict) -> dict:
    """`ask`, once a judging process for the same procedure, arguments and judged tree: for
    what describes the tree rather than computes with it (its sizes, a subject's facts), which
    cannot change while one process judges it; every gate that needs it gets the first
    answer (a worker costs a second of imports on a small CPU)."""
    key = (procedure, json.dumps(arguments, sort_keys=True), os.environ.get("PYTHONPATH"), device.target())
    if key not in _ANSWERED:
        _ANSWERED[key] = ask(procedure, arguments)
    return _ANSWERED[key]


def ask_tensors(procedure: str, arguments: dict, tensors: dict, *, tree=None) -> tuple:
    """procedure(arguments) on `tensors` ({name: tensor}, saved for the worker as
    `inputs_file`): (its JSON answer, the {name: tensor} it saved as `outputs_file`), the
    tensors read back as data only (torch.load with weights_only: a file the worker wrote
    runs no code here)."""
    import torch
    with tempfile.TemporaryDirectory(prefix="bitwise-tensors-") as folder:
        inputs, outputs = Path(folder) / "inputs.pt", Path(folder) / "outputs.pt"
        torch.save({name: t.detach().cpu().contiguous() for name, t in tensors.items()}, inputs)
        answer = ask(procedure, dict(arguments, inputs_file=str(inputs), outputs_file=str(outputs)),
                     writable=[folder], tree=tree)
        return answer, torch.load(outputs, weights_only=True)


def ask_together(*asks) -> list:
    """Answers of independent asks, each (procedure, arguments[, ask's keyword options]), their
    workers running at once (each its own process, as `ask`), in the order given."""
    with ThreadPoolExecutor(max_workers=len(asks)) as pool:
        futures = [pool.submit(ask, procedure, arguments, together=True, **(rest[0] if rest else {}))
                   for procedure, arguments, *rest in asks]
        return [future.result() for future in futures]


def _caches(side: str = "") -> list:
    """Directories a worker on this device must write besides its own folder: the Triton cache
    of its side (this environment's, suffixed by the side's name)."""
    if device.target() == "cpu":
        return []
    cache = Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")
    cache = cache.with_name(f"{cache.name}-{side}") if side else cache
    cache.mkdir(parents=True, exist_ok=True)
    return [str(cache)]


def _stack_cache(target: str) -> Path:
    """An outside stack's compile caches (its torch.compile'd sampler: ~10 s a worker on a 2-core
    CPU when cold), kept across workers: what it caches is that stack's code, not ours."""
    cache = Path(tempfile.gettempdir()) / f"bitwise-stack-cache-{os.getuid()}" / target
    cache.mkdir(parents=True, exist_ok=True)
    return cache


def confinement() -> str:
    """How this machine's workers run: what gates record beside a verdict."""
    reason = confine.unavailable()
    if reason:
        return f"not confined: {reason}"
    return "confined: own scratch folder" + ("" if device.target() == "cpu" else " and Triton's cache") + \
        " writable, no network"


def candidate_modules() -> list:
    """The judged tree's modules this process has loaded (none, in a gate that only asks)."""
    return sorted(name for name in sys.modules if name == "kernels" or name.startswith("kernels."))


def check_judge_clean(gate) -> None:
    """The condition every gate judged from workers records before its verdict."""
    loaded = candidate_modules()
    gate.check("the judging process loaded no module of the code under test", not loaded, loaded=loaded[:10])
