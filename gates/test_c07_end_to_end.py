"""Gate C07: small-model end to end.

Passes when, on the model's cut, the engine under continuous batching (random arrivals, a
small token budget so chunked prefill mixes with decodes) and the trainer's forward over the
same tokens give max, mean and std of |dp| and k3 KL all exactly 0, with at least one mixed
prefill/decode step. Negative control: the fast contract fails it.
"""
import random

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
    completions, engine = rollout(config, contract, weights, workload, EngineShape(tokens_per_step=40))
    stats = mismatch_stats([c.logprob_tensor for c in completions], score(config, contract, weights, completions))
    mixed = engine.step_phases[("decode", "prefill")]
    gate.check("mixed prefill/decode steps occurred", mixed > 0, mixed_steps=mixed)
    for figure in ("max_abs_dp", "mean_abs_dp", "std_abs_dp", "k3_kl"):
        gate.check(f"{figure} == 0", stats[figure] == 0.0, measured=stats[figure],
                   num_tokens=stats["num_tokens"])
    gate.verdict()
