"""`harness gates`: run the gate suites in a subprocess (the harness never imports a gate),
show progress, print a table and leave C<NN>.json in the run directory.

Gates are found as gates/test_cNN_*.py; each module's docstring names it ("Gate CNN: ...")
and states its pass condition ("Passes when ..."), which `--list` prints.
"""
import ast
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import gates
from gates.device import DEVICES
from harness.exit_codes import EXIT_DIFFERENT, EXIT_INCONCLUSIVE, EXIT_OK
from harness.stages.checkpoint_option import add_model_options, checkpoint_path
from harness.stages.target_option import add_target_option, model_for_target

GATES_DIR = Path(gates.__file__).resolve().parent


def discover() -> dict:
    """{"C07": path} for every gate module present."""
    found = {}
    for path in sorted(GATES_DIR.glob("test_c[0-9][0-9]_*.py")):
        found[f"C{path.name[6:8]}"] = path
    return found


def describe(path: Path) -> tuple:
    """(title, pass condition) from a gate module's docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    title = doc.splitlines()[0] if doc else path.stem
    flat = " ".join(doc.split())
    condition = re.search(r"Passes when\b.*?\.(?=\s|$)", flat)
    return title, condition.group(0) if condition else "(no pass condition stated)"


def select(only: str | None) -> dict:
    """The gates to run; ValueError naming the unknown ones."""
    available = discover()
    if not only:
        return available
    wanted = {}
    for name in only.split(","):
        digits = re.fullmatch(r"[cC]?(\d{1,2})", name.strip())
        key = f"C{int(digits.group(1)):02d}" if digits else name.strip()
        if key not in available:
            raise ValueError(f"unknown gate {name.strip()!r}; available: {sorted(available)}")
        wanted[key] = available[key]
    return wanted


def check_device(device: str) -> None:
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; choose from {DEVICES}")
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise ValueError("device cuda: no CUDA device is visible on this machine")
        try:
            import triton  # noqa: F401  (the consistent CUDA kernels are Triton kernels)
        except ImportError as error:
            raise ValueError(f"device cuda: Triton is not importable ({error})") from error


def run_gates(selected: dict, *, model: str, contract: str, out: Path, isolation=None, device="cpu",
              size="cut", checkpoint: str | None = None, target: str = "ours") -> dict:
    """Run each gate in turn; {gate: status} read back from the JSON it wrote. With an
    Isolation (harness/pristine.py) the gates judge another tree from a pristine copy; with
    `checkpoint` (an absolute directory) they run on it instead of the seeded cut."""
    statuses = {}
    out = Path(out).resolve()
    for name, path in selected.items():
        print(f"[{name}] {describe(path)[0]} ...", flush=True)
        started = time.perf_counter()
        if isolation is not None:
            isolation.require_pristine()
        where = ["--rootdir", str(GATES_DIR.parent)] if isolation is None else isolation.pytest_args()
        sent = run_with_verdict_pipe(
            [sys.executable, "-m", "pytest", str(path if isolation is None else isolation.gate_path(path)),
             "-q", "-p", "no:cacheprovider", *where, "--model", model, "--contract", contract,
             "--gate-out", str(out), "--device", device, "--size", size,
             *(["--checkpoint", checkpoint] if checkpoint else []),
             *(["--target", target] if target != "ours" else [])],
            cwd=GATES_DIR.parent if isolation is None else isolation.apparatus,
            env=dict(os.environ) if isolation is None else isolation.env())
        statuses[name] = keep_what_was_sent(out / f"{name}.json", sent.get(name))
        print(f"[{name}] {statuses[name]} in {time.perf_counter() - started:.1f} s", flush=True)
    return statuses


def run_with_verdict_pipe(command: list, *, cwd, env: dict) -> dict:
    """Run a gate process with a pipe for its verdicts (BITWISE_VERDICT_FD, gates/conftest.py),
    read while it runs; {gate: document} it sent ({} if none, or not one JSON document)."""
    read_end, write_end = os.pipe()
    chunks = []
    with os.fdopen(read_end) as pipe:
        reader = threading.Thread(target=lambda: chunks.append(pipe.read()), daemon=True)
        reader.start()
        try:
            subprocess.run(command, cwd=cwd, env={**env, "BITWISE_VERDICT_FD": str(write_end)},
                           pass_fds=(write_end,), capture_output=True, text=True)
        finally:
            os.close(write_end)
        reader.join()
    try:
        sent = json.loads(chunks[0]) if chunks and chunks[0] else {}
    except json.JSONDecodeError:
        return {}
    return sent if isinstance(sent, dict) else {}


def _canonical(document) -> str:
    return json.dumps(document, sort_keys=True)  # as text: a NaN figure equals itself


def keep_what_was_sent(result: Path, sent: dict | None) -> str:
    """The gate's status from the document its process sent; a verdict file that is not that
    document (rewritten after the verdict, or never sent) fails, the sent copy restored with
    the tampering named."""
    if sent is None:
        if not result.exists():
            return "fail"
        problem, sent = "a verdict file that no gate process sent", {"gate": result.stem, "status": "fail",
                                                                     "conditions": []}
    elif not result.exists():
        problem = "the gate process sent a verdict whose file is gone"
    else:
        try:
            if _canonical(json.loads(result.read_text())) == _canonical(sent):
                return sent["status"]
        except json.JSONDecodeError:
            pass
        problem = "the verdict file changed after the gate process sent it"
    sent = {**sent, "status": "fail", "conditions": sent["conditions"] + [
        {"name": "the verdict file is the document the gate process sent", "status": "fail", "problem": problem}]}
    result.write_text(json.dumps(sent, indent=2, sort_keys=True))
    print(f"TAMPERING: {result.name}: {problem}", flush=True)
    return "fail"


def format_table(statuses: dict, out: Path) -> str:
    lines = [f"{'gate':<6}{'status':<8}failed conditions"]
    for name, status in statuses.items():
        result = out / f"{name}.json"
        failed = []
        if result.exists():
            failed = [c["name"] for c in json.loads(result.read_text())["conditions"]
                      if c["status"] in ("fail", "inconclusive")]
        lines.append(f"{name:<6}{status:<8}"
                     f"{', '.join(failed) or ('(no result written)' if not result.exists() else '')}")
    lines.append(f"results: {out}")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    add_model_options(parser, "nemotron")
    parser.add_argument("--only", help="comma-separated gates, e.g. C3,C7")
    parser.add_argument("--contract", default="consistent", help="fast, consistent, or a YAML path")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--size", default="cut", help="model size C06 runs at (cut; wide-cut or full on GPUs)")
    parser.add_argument("--out", help="run directory (default runs/gates-<time>)")
    parser.add_argument("--list", action="store_true", help="print each gate's pass condition")
    add_target_option(parser)


def validate(model: str, contract: str, device: str, size: str = "cut") -> None:
    """ValueError naming what is wrong with the model, size, contract or device asked for."""
    from gates.faults import register_all
    from kernels.contract import load_contract
    from kernels.models.registry import config_name

    register_all()  # so a contract naming a planted fault validates here as in the gate process
    config_name(model, "cut")
    config_name(model, size)
    load_contract(contract)
    check_device(device)


def run(args) -> int:
    selected = select(args.only)
    if args.list:
        for name, path in selected.items():
            title, condition = describe(path)
            print(f"{name}  {title}\n      {condition}")
        return EXIT_OK
    model = model_for_target(args, "nemotron")
    if args.target == "ours":
        validate(model, args.contract, args.device, args.size)
    out = Path(args.out or f"runs/gates-{time.strftime('%Y%m%dT%H%M%S')}")
    statuses = run_gates(selected, model=model, contract=args.contract, out=out, device=args.device,
                         size=args.size, checkpoint=checkpoint_path(args), target=args.target)
    print(format_table(statuses, out))
    if "fail" in statuses.values():
        return EXIT_DIFFERENT
    return EXIT_INCONCLUSIVE if "inconclusive" in statuses.values() else EXIT_OK
