"""Engine under continuous batching vs trainer on the DeepSeek-V4 cut (issue 26's first CPU
condition): consistent contract, 64 sequences x 96 new tokens, prompts of 8-80 tokens (past
several CSA and HCA windows), random arrivals so prefill chunks mix with decodes, and queries
that see more blocks than the indexer keeps; every sampled token's log-prob equal bit for bit to
the trainer's (packed micro-batches of 8), max / mean / std |dp| and k3 KL exactly 0. The
fast contract differs on the same workload (negative control, its size printed)."""
from gates.compare import assert_bitwise_equal
from gates.mismatch import mismatch_stats
from gates.workload import EngineShape, Workload, rollout, score, seeded_weights
from kernels.contract import load_contract
from kernels.models.config import load_model_config
from tests.models.test_deepseek import BlocksSeen

CONFIG = load_model_config("deepseek-cut")


def test_consistent_engine_equals_trainer_bit_for_bit(fresh_seed):
    weights, contract, seen = seeded_weights(CONFIG, fresh_seed % 1000), load_contract("consistent"), BlocksSeen()
    workload = Workload(num_sequences=64, new_tokens=96, seed=fresh_seed)
    completions, engine = rollout(CONFIG, contract, weights, workload, EngineShape(tokens_per_step=48, max_running=16),
                                  observers=[seen])
    assert engine.step_phases[("decode", "prefill")] > 0, "no mixed step"
    assert seen.most > CONFIG.index_topk, seen.most  # the indexer chose among more blocks than it keeps
    engine_logprobs = [c.logprob_tensor for c in completions]
    trainer_logprobs = score(CONFIG, contract, weights, completions, micro_batch_size=8)  # C02: any micro-batch
    for index, (rollout_lp, trainer_lp) in enumerate(zip(engine_logprobs, trainer_logprobs)):
        assert_bitwise_equal(rollout_lp, trainer_lp, f"seed {fresh_seed}: sequence {index}")
    stats = mismatch_stats(engine_logprobs, trainer_logprobs)
    print(f"seed {fresh_seed}: {stats}")
    assert stats["num_tokens"] == 64 * 96
    for figure in ("max_abs_dp", "mean_abs_dp", "std_abs_dp", "k3_kl", "frac_tokens_differing"):
        assert stats[figure] == 0.0, (figure, stats)


def test_fast_contract_differs_negative_control(fresh_seed):
    weights, contract = seeded_weights(CONFIG, fresh_seed % 1000), load_contract("fast")
    completions, _ = rollout(CONFIG, contract, weights, Workload(num_sequences=16, new_tokens=24, seed=fresh_seed))
    stats = mismatch_stats([c.logprob_tensor for c in completions], score(CONFIG, contract, weights, completions))
    print(f"seed {fresh_seed}: fast contract, engine vs trainer: {stats}")
    assert stats["max_abs_dp"] > 0 and stats["frac_tokens_differing"] > 0.5
