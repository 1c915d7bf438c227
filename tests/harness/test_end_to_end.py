"""Engine under continuous batching vs trainer, on the Qwen3 cut.

Consistent contract: every sampled token's log-prob is bit-identical between the engine
(random arrivals, chunked prefill mixed with decodes, three batch shapes) and the trainer
(packed micro-batches of 64, 5 and 1, and padded micro-batches of 8), over 64 sequences x 64
new tokens; max, mean, std of |dp| and k3 KL are exactly 0. Fast contract: the same
workload differs (negative control) and the size is reported; so does the consistent
contract with any one of the regions whose fast variants differ between engine and trainer
(or follow the batch) swapped back to fast.
"""
import pytest

from gates.compare import assert_bitwise_equal
from gates.mismatch import mismatch_stats
from gates.workload import EngineShape, Workload, rollout, score, seeded_weights
from kernels.contract import load_contract
from kernels.models.config import load_model_config

CONFIG = load_model_config("qwen3-cut")
SHAPES = (EngineShape(tokens_per_step=48, max_running=16), EngineShape(tokens_per_step=7, max_running=5),
          EngineShape(tokens_per_step=160, max_running=64))
MICRO_BATCHINGS = ((64, "packed"), (5, "packed"), (1, "packed"), (8, "padded"))


@pytest.fixture(scope="module")
def weights():
    return seeded_weights(CONFIG, model_seed=0)


def test_consistent_engine_equals_trainer_bit_for_bit(weights, fresh_seed):
    contract = load_contract("consistent")
    workload = Workload(num_sequences=64, new_tokens=64, seed=fresh_seed)
    first = None
    for shape in SHAPES:
        completions, engine = rollout(CONFIG, contract, weights, workload, shape)
        assert engine.step_phases[("decode", "prefill")] > 0, f"{shape}: no mixed step"
        if first is None:
            first = completions
            continue
        for a, b in zip(first, completions):
            assert a.tokens == b.tokens, f"seed {fresh_seed}, {shape}: request {a.request.request_id} tokens"
            assert_bitwise_equal(a.logprob_tensor, b.logprob_tensor,
                                 f"seed {fresh_seed}, {shape} vs {SHAPES[0]}: request {a.request.request_id}")
    engine_logprobs = [c.logprob_tensor for c in first]
    for micro_batch_size, layout in MICRO_BATCHINGS:
        trainer_logprobs = score(CONFIG, contract, weights, first,
                                 micro_batch_size=micro_batch_size, layout=layout)
        for index, (rollout_lp, trainer_lp) in enumerate(zip(engine_logprobs, trainer_logprobs)):
            assert_bitwise_equal(rollout_lp, trainer_lp,
                                 f"seed {fresh_seed}, {layout} x{micro_batch_size}: sequence {index}")
        stats = mismatch_stats(engine_logprobs, trainer_logprobs)
        print(layout, micro_batch_size, stats)
        assert stats["num_tokens"] == 64 * 64
        for figure in ("max_abs_dp", "mean_abs_dp", "std_abs_dp", "k3_kl", "frac_tokens_differing"):
            assert stats[figure] == 0.0, (figure, stats)


def test_fast_contract_differs_negative_control(weights, fresh_seed):
    contract = load_contract("fast")
    workload = Workload(num_sequences=32, new_tokens=32, seed=fresh_seed)
    completions, _ = rollout(CONFIG, contract, weights, workload)
    stats = mismatch_stats([c.logprob_tensor for c in completions],
                           score(CONFIG, contract, weights, completions))
    print("fast contract:", stats)
    assert stats["frac_tokens_differing"] > 0.5, stats
    assert stats["max_abs_dp"] > 0 and stats["k3_kl"] != 0, stats


# Regions whose fast variant alone breaks the identity on this workload: different
# implementations on the two sides (norm, qk_norm, logprob), split-K below 64 rows in the
# engine (the projections), split-KV decode (attention). The others are the same function on
# both sides (embed, rope, mlp_act, sampler) or did not flip a bf16 rounding at this size.
REGIONS_THAT_MATTER = ("attention", "gate_up_proj", "norm", "o_proj", "qk_norm", "qkv_proj", "logprob")


@pytest.mark.parametrize("region", REGIONS_THAT_MATTER)
def test_one_fast_region_is_enough_to_differ(weights, fresh_seed, region):
    contract = load_contract("consistent").with_regions_from(load_contract("fast"), [region])
    workload = Workload(num_sequences=16, new_tokens=16, arrival_spread=8, seed=fresh_seed)
    completions, _ = rollout(CONFIG, contract, weights, workload)
    stats = mismatch_stats([c.logprob_tensor for c in completions],
                           score(CONFIG, contract, weights, completions))
    print(contract.name, stats)
    assert stats["frac_tokens_differing"] > 0, stats
