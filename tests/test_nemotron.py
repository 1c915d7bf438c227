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
