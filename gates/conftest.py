"""The gates' pytest plugin: options naming what is under test, a `gate` fixture that records
each pass condition with its measured figure, and one C<NN>.json per gate module written at
the end of the session (status pass / fail / inconclusive / n/a, conditions, seeds, model, contract, commit,
environment), so that reports and agents read data, not logs. When the harness passes a pipe
(BITWISE_VERDICT_FD), the same documents go down it once and it is closed: the harness keeps
that copy, so an exit hook in the judged code that rewrites the files is caught.

  python -m pytest gates/test_c07_end_to_end.py --model qwen3 --contract consistent --gate-out RUN
"""
import json
import os
import re
import sys
from pathlib import Path

import pytest

from gates import candidate, device
from gates.git_objects import run_git
from gates.switches import switch
from gates.target import missing

_RECORDS: dict = {}


def pytest_addoption(parser):
    group = parser.getgroup("gates")
    group.addoption("--model", default="qwen3", help="model family under test")
    group.addoption("--contract", default="consistent", help="contract name or YAML path")
    group.addoption("--gate-out", default=None, help="run directory for C<NN>.json")
    group.addoption("--device", default="cpu", choices=device.DEVICES,
                    help="where the code under test runs (references stay on the CPU)")
    group.addoption("--size", default="cut",
                    help="model size C06 runs its layouts at (cut; wide-cut or full on GPUs); "
                         "the other gates run the cut")
    group.addoption("--checkpoint", default=None,
                    help="a transformers checkpoint directory the gates run on instead of the seeded cut "
                         "(gates/subject.py)")
    group.addoption("--target", default="ours",
                    help="the stack judged (gates/target.py): ours, or transformers / vllm on --checkpoint")


def pytest_configure(config):
    device.select(config.getoption("--device"))


def pytest_collection_finish(session):
    """Gates that run the code under test in this process get the planted faults registered
    (contracts may name them: gates/faults.py); a gate module that sets CANDIDATE_IN_WORKERS
    imports none of it here (gates/candidate.py), and its workers register them."""
    if any(not getattr(item.module, "CANDIDATE_IN_WORKERS", False) for item in session.items):
        from gates.faults import register_all
        register_all()


def _environment() -> dict:
    """The stack's deployment fingerprint, taken without loading the code under test here
    when this process has not already: the last worker's report, or a worker asked for it."""
    if "kernels" in sys.modules:
        from kernels.contract.identity import deployment_fingerprint
        return deployment_fingerprint()
    return candidate.reported_environment or candidate.ask("environment", {"device": device.target()})


class GateRecord:
    """The conditions one gate test checked: `check` records each with its figures, `verdict`
    fails the test if any did not hold (every condition is recorded before that)."""

    def __init__(self, gate: str, model: str, contract: str, size: str = "cut", checkpoint: str | None = None,
                 target: str = "ours"):
        self.gate, self.model, self.contract, self.size = gate, model, contract, size
        self.checkpoint, self.target = checkpoint, target
        """A checkpoint directory the gate runs on (gates/subject.py), or None: the seeded cut."""
        self.conditions, self.inputs, self.not_applicable = [], {}, None
        self.judged = False

    def subject(self, size: str = "cut") -> dict:
        """What a worker runs (gates/procedures.py): this record's model, contract, checkpoint."""
        return {"model": self.model, "contract": self.contract, "checkpoint": self.checkpoint, "size": size,
                "target": self.target}

    def check(self, name: str, passed: bool, **figures) -> None:
        self.conditions.append({"name": name, "status": "pass" if passed else "fail", **figures})

    def check_n_a(self, name: str, reason: str) -> None:
        """A condition that cannot be checked here: reported as n/a with its reason, never
        as a pass (the gate's other conditions still decide pass or fail)."""
        self.conditions.append({"name": name, "status": "n/a", "reason": reason})

    def check_inconclusive(self, name: str, **figures) -> None:
        """A condition measured but not decided (a ratio whose noise straddles its floor): the
        gate is `inconclusive` unless another condition fails; never a pass."""
        self.conditions.append({"name": name, "status": "inconclusive", **figures})

    def verdict(self) -> None:
        self.judged = True
        failed = [c for c in self.conditions if c["status"] == "fail"]
        undecided = [c["name"] for c in self.conditions if c["status"] == "inconclusive"]
        assert any(c["status"] == "pass" for c in self.conditions), f"{self.gate}: no condition was checked"
        assert not failed, f"{self.gate}: {len(failed)} condition(s) failed: {failed}"
        assert not undecided, f"{self.gate}: inconclusive: {undecided}"

    def n_a(self, reason: str) -> None:
        self.not_applicable = reason
        pytest.skip(f"n/a: {reason}")


class SizedRecord:
    """A GateRecord seen through one model size: its conditions named '[size] ...', its inputs
    kept under the record's inputs['sizes'][size] (a gate that runs every shipped size)."""

    def __init__(self, record: GateRecord, size: str):
        self.record, self.size, self.model = record, size, record.model
        self.inputs = record.inputs.setdefault("sizes", {}).setdefault(size, {})

    def subject(self) -> dict:
        return self.record.subject(self.size)

    def check(self, name: str, passed: bool, **figures) -> None:
        self.record.check(f"[{self.size}] {name}", passed, **figures)

    def check_n_a(self, name: str, reason: str) -> None:
        self.record.check_n_a(f"[{self.size}] {name}", reason)


@pytest.fixture
def gate(request):
    match = re.match(r"test_c(\d\d)_", Path(request.node.fspath).name)
    name = f"C{match.group(1)}" if match else "C??"
    target = request.config.getoption("--target")
    record = GateRecord(name, request.config.getoption("--model"), request.config.getoption("--contract"),
                        request.config.getoption("--size"), request.config.getoption("--checkpoint"), target)
    _RECORDS.setdefault(name, []).append(record)
    # a gate states what it needs of a target beyond generate and score (gates/target.py)
    reason = missing(target, getattr(request.module, "TARGET_NEEDS", ("contract", "region_doors")))
    if reason:
        record.n_a(f"{name} needs what this target lacks: {reason}")
    yield record
    if not record.judged and record.not_applicable is None:
        pytest.fail(f"{name}: the test never called gate.verdict()")


def _status(records) -> str:
    conditions = [c for r in records for c in r.conditions]
    if any(c["status"] == "fail" for c in conditions):
        return "fail"
    if any(c["status"] == "inconclusive" for c in conditions):
        return "inconclusive"
    if any(r.not_applicable for r in records) and not conditions:
        return "n/a"
    checked = any(c["status"] == "pass" for c in conditions)
    return "pass" if checked else "fail"  # a gate that checked nothing has not passed


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A gate test that raised counts as a failed condition, even if every condition it
    recorded before the error held."""
    outcome = yield
    report = outcome.get_result()
    record = getattr(item, "funcargs", {}).get("gate")
    if report.failed and isinstance(record, GateRecord) and call.when == "call":
        decided = any(c["status"] in ("fail", "inconclusive") for c in record.conditions)
        if not decided:
            record.conditions.append({"name": "the gate test completed", "status": "fail",
                                      "error": str(report.longrepr)[-2000:]})


def pytest_sessionfinish(session, exitstatus):
    out = session.config.getoption("--gate-out")
    if not out or not _RECORDS:
        return
    Path(out).mkdir(parents=True, exist_ok=True)
    commit = run_git(".", "rev-parse", "HEAD").stdout.strip()
    sent, environment = {}, _environment()
    for name, records in _RECORDS.items():
        document = {
            "gate": name, "status": _status(records), "model": records[0].model,
            "contract": records[0].contract, "checkpoint": records[0].checkpoint, "device": device.target(),
            "target": records[0].target,
            "commit": commit,
            "environment": environment,
            "conditions": [c for r in records for c in r.conditions],
            "inputs": [r.inputs for r in records],
            "not_applicable": [r.not_applicable for r in records if r.not_applicable],
        }
        (Path(out) / f"{name}.json").write_text(json.dumps(document, indent=2, sort_keys=True))
        sent[name] = document
    _send_verdicts(sent)


def _send_verdicts(documents: dict) -> None:
    """Every gate's document, once, down the pipe the harness passed (BITWISE_VERDICT_FD), which
    is then closed: what this process's exit hooks do to the files later cannot change it."""
    fd = switch("BITWISE_VERDICT_FD")
    if fd:
        with os.fdopen(int(fd), "w") as pipe:
            pipe.write(json.dumps(documents, sort_keys=True))
