"""Nemotron-H cut (MEM*EM: Mamba-2, MoE, attention) end to end.

Consistent contract: engine under continuous batching vs trainer, bit for bit, over 64
sequences x 96 new tokens (prompts up to 80 tokens with chunk 16: every sequence crosses
several chunk boundaries and decodes land mid-chunk and on boundaries); a GRPO step and an
exact resume. Fast contract: differences, with their size (negative control).
"""
import dataclasses
import time

import pytest
import torch

from gates.compare import assert_bitwise_equal
from gates.mismatch import mismatch_stats
from gates.workload import EngineShape, Workload, rollout, score, seeded_weights
from kernels.contract import load_contract
from kernels.models.config import load_model_config
from kernels.trainer.rl_loop import GRPORun, GRPOSettings

CONFIG = load_model_config("nemotron-cut")


@pytest.fixture(scope="module")
def weights():
    return seeded_weights(CONFIG, model_seed=0)


def test_consistent_engine_equals_trainer_bit_for_bit(weights, fresh_seed):
    contract = load_contract("consistent")
    workload = Workload(num_sequences=64, new_tokens=96, seed=fresh_seed)
    completions, engine = rollout(CONFIG, contract, weights, workload, EngineShape(tokens_per_step=64, max_running=16))
    assert engine.step_phases[("decode", "prefill")] > 0, engine.step_phases
    engine_logprobs = [c.logprob_tensor for c in completions]
    trainer_logprobs = score(CONFIG, contract, weights, completions, micro_batch_size=16)
    assert len(engine_logprobs) == len(trainer_logprobs) == 64
    for index, (a, b) in enumerate(zip(engine_logprobs, trainer_logprobs)):
        assert_bitwise_equal(a, b, f"seed {fresh_seed}: sequence {index}")
    stats = mismatch_stats(engine_logprobs, trainer_logprobs)
    print("nemotron consistent:", stats)
    assert stats["num_tokens"] == 64 * 96
    assert all(stats[k] == 0.0 for k in ("max_abs_dp", "mean_abs_dp", "std_abs_dp", "k3_kl",
                                         "frac_tokens_differing")), stats


def test_fast_contract_differs_negative_control(weights, fresh_seed):
    contract = load_contract("fast")
    workload = Workload(num_sequences=16, new_tokens=48, arrival_spread=10, seed=fresh_seed)
    completions, _ = rollout(CONFIG, contract, weights, workload)
    stats = mismatch_stats([c.logprob_tensor for c in completions], score(CONFIG, contract, weights, completions))
    print("nemotron fast:", stats)
    assert stats["frac_tokens_differing"] > 0.5 and stats["max_abs_dp"] > 0, stats


def test_grpo_step_and_exact_resume(tmp_path, fresh_seed):
    contract = load_contract("consistent")
    settings = GRPOSettings(prompts_per_step=2, group_size=4, max_new_tokens=20, seed=fresh_seed, lr=3e-3)
    straight = GRPORun(CONFIG, contract, settings)
    started = time.perf_counter()
    first = straight.step()
    print(f"nemotron cut GRPO step: {time.perf_counter() - started:.2f} s")
    second = straight.step()
    for record in (first, second):
        for a, b, c in zip(record.engine_logprobs, record.trainer_logprobs, record.update_logprobs):
            assert_bitwise_equal(a, b, f"seed {fresh_seed} step {record.step}: trainer_fwd")
            assert_bitwise_equal(a, c, f"seed {fresh_seed} step {record.step}: trainer_bwd")
    interrupted = GRPORun(CONFIG, contract, settings)
    interrupted.step()
    interrupted.save(tmp_path / "ckpt")
    resumed = GRPORun.resume(tmp_path / "ckpt", CONFIG, contract, settings)
    again = resumed.step()
    assert again.rewards == second.rewards
    for a, b in zip(again.engine_logprobs, second.engine_logprobs):
        assert_bitwise_equal(a, b, f"seed {fresh_seed}: first step after resume")
    for name, tensor in straight.trainer.weights().items():
        assert_bitwise_equal(resumed.trainer.weights()[name], tensor, f"weight {name} after resume")


QUANT_CONFIG = load_model_config("nemotron-cut-quant")


def test_quantized_release_engine_equals_trainer_and_fast_differs(fresh_seed):
    """NVFP4 experts, FP8 W8A8 Mamba projections, FP8 KV: bitwise under the consistent
    contract; the per-tensor activation scale alone (act_quant fast) breaks it."""
    weights = seeded_weights(QUANT_CONFIG, model_seed=1)
    workload = Workload(num_sequences=16, new_tokens=40, arrival_spread=8, seed=fresh_seed)
    consistent = load_contract("consistent")
    completions, engine = rollout(QUANT_CONFIG, consistent, weights, workload)
    assert engine.cache.paged.keys.dtype == torch.float8_e4m3fn, "the engine's KV pool is not FP8"
    stats = mismatch_stats([c.logprob_tensor for c in completions],
                           score(QUANT_CONFIG, consistent, weights, completions))
    print("quantized consistent:", stats)
    assert stats["frac_tokens_differing"] == 0.0 and stats["max_abs_dp"] == 0.0, stats
    per_tensor = consistent.with_regions_from(load_contract("fast"), ["act_quant"])
    completions, _ = rollout(QUANT_CONFIG, per_tensor, weights, workload)
    stats = mismatch_stats([c.logprob_tensor for c in completions],
                           score(QUANT_CONFIG, per_tensor, weights, completions))
    print("per-tensor FP8 activations:", stats)
    assert stats["frac_tokens_differing"] > 0, stats


def test_quantization_is_applied_and_trains_through_the_ste(fresh_seed):
    contract = load_contract("consistent")
    plain = dataclasses.replace(QUANT_CONFIG, expert_quant="none", mamba_proj_quant="none", kv_cache_dtype="auto")
    weights = seeded_weights(QUANT_CONFIG, model_seed=2)
    workload = Workload(num_sequences=4, new_tokens=8, arrival_spread=2, seed=fresh_seed)
    quantized, _ = rollout(QUANT_CONFIG, contract, weights, workload)
    unquantized = score(plain, contract, weights, quantized)
    differing = sum(int((a.view(torch.int32) != b.view(torch.int32)).sum())
                    for a, b in zip([c.logprob_tensor for c in quantized], unquantized))
    assert differing > 0, "quantized and unquantized models gave the same log-probs"
    run = GRPORun(QUANT_CONFIG, contract, GRPOSettings(prompts_per_step=1, group_size=4, max_new_tokens=8,
                                                       seed=fresh_seed, lr=1e-2))
    before = run.trainer.optimizer.master["layers.1.experts_up"].clone()
    run.step()
    after = run.trainer.optimizer.master["layers.1.experts_up"]
    assert not torch.equal(before, after), "no gradient reached the NVFP4 experts' master weights"
