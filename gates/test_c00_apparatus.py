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
here, pointing at that commit; and, when the harness judges an agent's worktree (BITWISE_TAMPER), its tamper scan found nothing
(harness/tamper.py). Negative control: a trainer with other weights, another contract or
another transport fails the identity condition, another transport also the comm condition
(tests/test_gate_c00_c10.py); a missing or altered frozen record fails the baseline
condition (tests/test_freeze_profile.py).
"""
import os

from gates.apparatus import ROOT, identity_mismatches, modified_judging_files, tamper_violations
from gates.baseline import verify_frozen
from gates.inputs import fresh_seed
from gates import device
from gates.subject import subject_config, subject_label, subject_weights
from kernels.contract import load_contract
from kernels.engine.engine import Engine
from kernels.trainer.trainer import Trainer


def test_apparatus(gate):
    config = subject_config(gate)
    contract = load_contract(gate.contract)
    seed = fresh_seed()
    gate.inputs = {"seed": seed, "config": subject_label(gate)}
    trainer = Trainer(config, contract, weights=subject_weights(gate, config, seed), device=device.target())
    engine = Engine(config, contract, trainer.weights(), device=device.target())
    engine_ids, trainer_ids = engine.identities(), trainer.identities()
    mismatches = identity_mismatches(engine_ids, trainer_ids)
    gate.check("identities equal (semantic, numerical_policy, deployment)", not mismatches,
               mismatches=mismatches, engine=engine_ids, trainer=trainer_ids)
    gate.check("engine and trainer use the same comm backend and transport", engine.comm == trainer.comm,
               engine=engine.comm, trainer=trainer.comm)
    base = os.environ.get("BITWISE_BASE", "HEAD")
    modified = modified_judging_files(base)
    gate.check("gates/ and harness/ unmodified since the base commit", not modified, base=base, modified=modified)
    problems, figures = verify_frozen(target=device.target())
    gate.check("baseline frozen and its hash verified", not problems, problems=problems, **figures)
    violations = tamper_violations()
    if violations is not None:
        gate.check("the harness's tamper scan of the tree under judgement found nothing", not violations,
                   violations=violations, tree=str(ROOT))
    gate.verdict()
