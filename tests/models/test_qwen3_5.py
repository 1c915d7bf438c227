"""Qwen3.5 on the CPU cut (issue 27): the engine under continuous batching, 64 sequences x 96 new
tokens, every decode crossing 5+ of the Gated DeltaNet's chunk boundaries (chunk 16) and prefill
chunks mixing with decodes, against the trainer's packed micro-batches of 5: under the consistent contract every sampled
token's log-prob is equal bit for bit (|dp| and k3 KL exactly 0); the fast contract (chunked
prefill from each call's first row, the one-step recurrence in decode, transformers' gates and
norms) differs on the same kind of workload, with its size printed. The configs load and refuse
bad fields by name."""
import dataclasses

import pytest

from gates.compare import assert_bitwise_equal
from gates.mismatch import mismatch_stats
from gates.workload import EngineShape, Workload, rollout, score, seeded_weights
from kernels.contract import load_contract
from kernels.models.config import config_from_mapping, load_model_config
from kernels.models.qwen3_5_config import Qwen3_5Config

CONFIG = load_model_config("qwen3_5-cut")


def test_consistent_engine_equals_trainer_bit_for_bit(fresh_seed):
    weights, contract = seeded_weights(CONFIG, fresh_seed % 1000), load_contract("consistent")
    workload = Workload(num_sequences=64, new_tokens=96, max_prompt_len=60, arrival_spread=40, seed=fresh_seed)
    completions, engine = rollout(CONFIG, contract, weights, workload, EngineShape(tokens_per_step=48, max_running=16))
    assert engine.step_phases[("decode", "prefill")] > 0, "no mixed step"
    chunk = CONFIG.chunk_size
    crossed = [(len(c.request.prompt) + len(c.tokens)) // chunk - len(c.request.prompt) // chunk for c in completions]
    assert min(crossed) >= 5, f"a sequence's decode crossed only {min(crossed)} chunk boundaries"
    engine_logprobs = [c.logprob_tensor for c in completions]
    trainer_logprobs = score(CONFIG, contract, weights, completions, micro_batch_size=5)
    for index, (rollout_lp, trainer_lp) in enumerate(zip(engine_logprobs, trainer_logprobs)):
        assert_bitwise_equal(rollout_lp, trainer_lp, f"seed {fresh_seed}: sequence {index}")
    stats = mismatch_stats(engine_logprobs, trainer_logprobs)
    print(f"seed {fresh_seed}: {stats}")
    assert stats["num_tokens"] == 64 * 96 and stats["max_abs_dp"] == stats["k3_kl"] == 0.0, stats


def test_fast_contract_differs_negative_control(fresh_seed):
    weights, contract = seeded_weights(CONFIG, fresh_seed % 1000), load_contract("fast")
    completions, _ = rollout(CONFIG, contract, weights, Workload(num_sequences=6, new_tokens=20, seed=fresh_seed))
    stats = mismatch_stats([c.logprob_tensor for c in completions], score(CONFIG, contract, weights, completions))
    print(f"seed {fresh_seed}: fast contract, engine vs trainer: {stats}")
    assert stats["max_abs_dp"] > 0 and stats["frac_tokens_differing"] > 0.5, stats


def test_the_release_config_loads_and_bad_fields_are_named():
    full = load_model_config("qwen3_5-35b-a3b")
    assert full.num_layers == 40 and full.mixers.count("full_attention") == 10 and full.rotary_dim == 64
    assert full.conv_dim == 2 * 16 * 128 + 32 * 128
    fields = dataclasses.asdict(CONFIG)
    for field, value, message in (("layer_pattern", "LLXA", "characters must be in"),
                                  ("linear_num_value_heads", 3, "multiple of linear_num_key_heads"),
                                  ("partial_rotary_factor", 0.3, "even rotary width")):
        with pytest.raises(ValueError, match=message):
            config_from_mapping(Qwen3_5Config, {**fields, field: value}, "test")


def test_the_wide_cut_is_the_release_at_full_width_with_both_layer_kinds():
    """qwen3_5-wide-cut (the GPU gates' and benchmarks' size) differs from qwen3_5-35b-a3b only in
    its layers and experts: every width, head, chunk and the shared expert are the release's."""
    wide, release = load_model_config("qwen3_5-wide-cut"), load_model_config("qwen3_5-35b-a3b")
    wide.validate()
    differing = {f.name for f in dataclasses.fields(wide) if getattr(wide, f.name) != getattr(release, f.name)}
    assert differing == {"layer_pattern", "n_routed_experts"}, differing
    assert set(wide.layer_pattern) == {"L", "A"} and wide.n_routed_experts >= wide.num_experts_per_tok
