"""Gate C07: small-model end to end.

Passes when, on the model's cut, the engine under continuous batching (random arrivals, a
small token budget so chunked prefill mixes with decodes) and the trainer's forward over the
same tokens give max, mean and std of |dp| and k3 KL all exactly 0, with at least one mixed
prefill/decode step and contexts that crossed the contract's key block (and the SSM chunk
where the model has Mamba layers: gates/boundaries.py; else vacuous); on the CPU the engine
runs on 1 intra-op thread and the trainer on at least 2, as their pools may differ. The
engine and the trainer each run in their own worker (gates/candidate.py): the trainer's
worker receives only the tokens, and this process, which writes the verdict, loads no module
of the code under test (a condition). Negative controls: the fast contract fails it, so does
linear.planted_thread_split_k (a reduction split per thread), and contexts that stop short of
the key block fail its crossing condition (tests/gates/test_gate_c01_c03.py). An outside target
(`--target transformers`, gates/target.py) runs it through generate and score; the step and
block conditions are n/a there, with the reason.
"""
from gates import device
from gates.boundaries import check_crossed
from gates.candidate import ask, check_judge_clean, confinement
from gates.compare import from_int32_bits
from gates.inputs import fresh_seed
from gates.mismatch import mismatch_stats
from gates.target_runs import as_sequences

CANDIDATE_IN_WORKERS = True  # gates/conftest.py: this module never imports the code under test
TARGET_NEEDS = ()  # any target's generate and score will do (gates/target.py)
NUM_SEQUENCES, NEW_TOKENS = 32, 32


def test_engine_equals_trainer(gate):
    seed = fresh_seed()
    subject = gate.subject()
    common = {"subject": subject, "model_seed": seed % 1000, "device": device.target()}
    workload = {"num_sequences": NUM_SEQUENCES, "new_tokens": NEW_TOKENS, "arrival_spread": 16, "seed": seed}
    gate.inputs = {"seed": seed, "workload": workload, "subject": subject, "workers": confinement()}
    engine = ask("rollout_bits", dict(common, workload=workload, shape={"tokens_per_step": 40}), side="engine")
    sequences = as_sequences(engine["completions"])
    trainer = ask("trainer_bits", dict(common, sequences=sequences), side="trainer")
    gate.inputs.update(config=engine["config"], intra_op_threads={"engine": engine["threads"],
                                                                  "trainer": trainer["threads"]})
    stats = mismatch_stats(from_int32_bits(c["bits"] for c in engine["completions"]), from_int32_bits(trainer["bits"]))
    if engine["mixed_steps"] is None:  # an outside target: no engine steps or key blocks to see
        outside = f"target {subject['target']} reports no engine steps or key blocks"
        gate.check_n_a("mixed prefill/decode steps occurred", outside)
        gate.check_n_a("contexts crossed a key block", outside)
    else:
        gate.check("mixed prefill/decode steps occurred", engine["mixed_steps"] > 0,
                   mixed_steps=engine["mixed_steps"])
        check_crossed(gate, [len(c["prompt"]) + len(c["tokens"]) for c in engine["completions"]],
                      engine["boundaries"])
    for figure in ("max_abs_dp", "mean_abs_dp", "std_abs_dp", "k3_kl"):
        gate.check(f"{figure} == 0", stats[figure] == 0.0, measured=stats[figure],
                   num_tokens=stats["num_tokens"])
    check_judge_clean(gate)
    gate.verdict()
