"""C04's judge-side plumbing (gates/test_c04_discrete.py): the subject's facts the inputs are
crafted from, every check's calls sent to one worker (gates/discrete_runs.py) as files of
tensors and the outputs read back as data (torch.load with weights_only), and the conditions
that compare them. Nothing here imports the code under test.
"""
import torch

from gates import device
from gates.candidate import ask_once, ask_tensors
from gates.compare import first_differences


def subject_facts(gate) -> dict:
    """The subject's regions, dtype (a torch dtype) and sizes, asked of a worker once a process."""
    facts = ask_once("subject_facts", {"subject": gate.subject(), "device": device.target()})
    return dict(facts, dtype=getattr(torch, facts["dtype"]))


def grouped(found: dict) -> dict:
    """{case: tuple of output tensors} from a region call's 'case/index' outputs."""
    by_case = {}
    for name in sorted(found, key=lambda n: (n.rpartition("/")[0], int(n.rpartition("/")[2]))):
        by_case.setdefault(name.rpartition("/")[0], []).append(found[name])
    return {case: tuple(ts) for case, ts in by_case.items()}


def run_all(gate, requests: dict) -> dict:
    """Every check's calls in one worker: {label: (call, {name: tensor})} -> {label: outputs}
    ({case: tuple of tensors} for a region call, {run: tokens} for the sampler)."""
    tensors = {f"{label}/{name}": t for label, (_, named) in requests.items() for name, t in named.items()}
    _, found = ask_tensors("c04_outputs", {"subject": gate.subject(), "device": device.target(),
                                           "calls": {label: call for label, (call, _) in requests.items()}}, tensors)
    answers = {}
    for label, (call, _) in requests.items():
        mine = {name[len(label) + 1:]: t for name, t in found.items() if name.startswith(label + "/")}
        answers[label] = mine if call["kind"] == "sampler" else grouped(mine)
    return answers


def uses_region(gate, facts, region, why) -> bool:
    """Whether the model uses `region`; if not, an n/a condition with the reason."""
    if region not in facts["regions"]:
        gate.check_n_a(region, f"{gate.model} has no {region} region: {why}")
        return False
    return True


def check_equal(gate, name, outputs, expected=None):
    """One condition: every case's outputs carry the bits of `expected` (default trainer_fwd's)."""
    differences = {case: first_differences(out, outputs["trainer_fwd"] if expected is None else expected)
                   for case, out in outputs.items()}
    gate.check(name, all(text == "identical" for text in differences.values()), **differences)


def require(gate, what, evidence):
    """Every counted hazard must be present: recorded as a condition (a vacuous input fails the
    gate even if the test stops here), then HazardEvidence.require raises VacuousGate."""
    gate.check(f"{what}: the inputs hold the claimed hazards", all(evidence.counts.values()), **evidence.counts)
    evidence.require(*evidence.counts)
