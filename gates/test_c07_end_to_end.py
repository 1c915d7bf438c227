"""Gate C07: small-model end to end.

Passes when, on the model's cut, the engine under continuous batching (random arrivals, a
small token budget so chunked prefill mixes with decodes) and the trainer's forward over the
same tokens give max, mean and std of |dp| and k3 KL all exactly 0, with at least one mixed
prefill/decode step; on the CPU the engine runs on 1 intra-op thread and the trainer on at
least 2, as their pools may differ. Negative control: the fast contract fails it, and so does
linear.planted_thread_split_k (a reduction split per thread).
"""
import random

from gates.case_calls import intra_op_threads, thread_counts
from gates.mismatch import mismatch_stats
from gates.subject import subject_config, subject_label, subject_weights
from gates.workload import EngineShape, Workload, rollout, score
from kernels.contract import load_contract

NUM_SEQUENCES, NEW_TOKENS = 32, 32


def test_engine_equals_trainer(gate):
    config = subject_config(gate)
    contract = load_contract(gate.contract)
    seed = random.SystemRandom().randrange(2**31)
    gate.inputs = {"seed": seed, "num_sequences": NUM_SEQUENCES, "new_tokens": NEW_TOKENS,
                   "config": subject_label(gate)}
    weights = subject_weights(gate, config, seed % 1000)
    workload = Workload(num_sequences=NUM_SEQUENCES, new_tokens=NEW_TOKENS, arrival_spread=16, seed=seed)
    engine_threads, trainer_threads = thread_counts()
    gate.inputs["intra_op_threads"] = {"engine": engine_threads, "trainer": trainer_threads}
    with intra_op_threads(engine_threads):
        completions, engine = rollout(config, contract, weights, workload, EngineShape(tokens_per_step=40))
    with intra_op_threads(trainer_threads):
        trainer_logprobs = score(config, contract, weights, completions)
    stats = mismatch_stats([c.logprob_tensor for c in completions], trainer_logprobs)
    mixed = engine.step_phases[("decode", "prefill")]
    gate.check("mixed prefill/decode steps occurred", mixed > 0, mixed_steps=mixed)
    for figure in ("max_abs_dp", "mean_abs_dp", "std_abs_dp", "k3_kl"):
        gate.check(f"{figure} == 0", stats[figure] == 0.0, measured=stats[figure],
                   num_tokens=stats["num_tokens"])
    gate.verdict()
