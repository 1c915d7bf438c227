"""Gate C00: apparatus & fairness.

Passes when the engine and the trainer, built from the same weights and contract, report
equal semantic, numerical_policy and deployment identities (which cover the weights hash,
the resolved contract with its sources, and the environment fingerprint with the comm
transport), the two sides use the same comm backend and transport, no file under gates/ or
harness/ differs from the run's base commit (BITWISE_BASE, default HEAD), and the device
target's baseline is frozen (baseline/frozen.json on the CPU, baseline/frozen-cuda.json on
CUDA, written by `harness freeze-baseline [--device]`) with its recorded commit
present, the fast path's content hash recomputed from that commit's files equal to the
recorded one, so is the hash of every file of its kernels/ and gates/ (files_hash, where the
record has one; an older record's figures say it has none), and the tag, where it exists
here, pointing at that commit; and, when the harness judges an agent's worktree (BITWISE_TAMPER), its
tamper scan found nothing (harness/tamper.py). Each side is built in a worker of its own (gates/candidate.py): the
trainer from the seeded weights, the engine from the weights the trainer's worker saved, as
weight sync sends them; this process, which writes the verdict, loads no module of the code
under test (a condition). Negative control: a trainer with other weights, another contract or
another transport fails the identity condition, another transport also the comm condition
(tests/gates/test_gate_c00_c10.py); a missing or altered frozen record fails the baseline
condition (tests/harness/test_freeze_profile.py).
"""
import tempfile

from gates import device
from gates.apparatus import ROOT, identity_mismatches, modified_judging_files, tamper_violations
from gates.baseline import verify_frozen
from gates.candidate import ask, check_judge_clean, confinement
from gates.inputs import fresh_seed
from gates.switches import switch

CANDIDATE_IN_WORKERS = True  # gates/conftest.py: this module never imports the code under test


def test_apparatus(gate):
    seed = fresh_seed()
    gate.inputs = {"seed": seed, "workers": confinement()}
    with tempfile.TemporaryDirectory(prefix="c00-sync-") as folder:  # the trainer's weights, synced by file
        asked = {"subject": gate.subject(), "model_seed": seed % 1000, "device": device.target(),
                 "weights_file": f"{folder}/weights.pt"}
        trainer = ask("c00_side", dict(asked, side="trainer"), writable=[folder])
        engine = ask("c00_side", dict(asked, side="engine"))
    gate.inputs["config"] = trainer["config"]
    engine_ids, trainer_ids = engine["identities"], trainer["identities"]
    mismatches = identity_mismatches(engine_ids, trainer_ids)
    gate.check("identities equal (semantic, numerical_policy, deployment)", not mismatches,
               mismatches=mismatches, engine=engine_ids, trainer=trainer_ids)
    gate.check("engine and trainer use the same comm backend and transport", engine["comm"] == trainer["comm"],
               engine=engine["comm"], trainer=trainer["comm"])
    base = switch("BITWISE_BASE")
    modified = modified_judging_files(base)
    gate.check("the judge, the baseline record and the rules unmodified since the base commit", not modified,
               base=base, modified=modified)
    problems, figures = verify_frozen(target=device.target())
    gate.check("baseline frozen and its hash verified", not problems, problems=problems, **figures)
    violations = tamper_violations()
    if violations is not None:
        gate.check("the harness's tamper scan of the tree under judgement found nothing", not violations,
                   violations=violations, tree=str(ROOT))
    check_judge_clean(gate)
    gate.verdict()
