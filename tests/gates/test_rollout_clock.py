"""The one rollout clock (gates/rollout_clock.py): a stepped rollout is the same work as
`generate`, bit for bit, and both report the time they took."""
import torch

from gates.rollout_clock import timed_rollout
from gates.workload import Workload, make_engine, make_requests, seeded_weights
from kernels.contract import load_contract
from kernels.models.config import load_model_config


def _bits(completions) -> list:
    return [(c.tokens, c.logprob_tensor.float().view(torch.int32).tolist()) for c in completions]


def test_a_stepped_rollout_generates_the_same_bits_as_generate_and_times_each_step():
    config, contract = load_model_config("qwen3-cut"), load_contract("consistent")
    weights = seeded_weights(config)
    workload = Workload(num_sequences=6, new_tokens=5, max_prompt_len=20, arrival_spread=3,
                        seed=int(torch.randint(1 << 30, ())))
    whole = timed_rollout(make_engine(config, contract, weights, workload),
                          make_requests(workload, config.vocab_size))
    stepped = timed_rollout(make_engine(config, contract, weights, workload),
                            make_requests(workload, config.vocab_size), per_step=True)
    assert _bits(whole[0]) == _bits(stepped[0])
    assert all(len(c.tokens) == workload.new_tokens for c in stepped[0])
    assert whole[3] == [] and len(stepped[3]) >= workload.new_tokens
    assert {phase for phase, _ in stepped[3]} & {"decode", "prefill", "prefill+decode"}
    assert stepped[1] >= sum(seconds for _, seconds in stepped[3]) > 0
    assert whole[1] > 0 and whole[2] > 0


def test_the_clock_tells_different_completions_apart():
    """The comparison above can fail: another workload seed gives other bits."""
    config, contract = load_model_config("qwen3-cut"), load_contract("consistent")
    weights = seeded_weights(config)
    one, other = (Workload(num_sequences=3, new_tokens=4, max_prompt_len=12, arrival_spread=2, seed=seed)
                  for seed in (1, 2))
    first = timed_rollout(make_engine(config, contract, weights, one), make_requests(one, config.vocab_size))
    second = timed_rollout(make_engine(config, contract, weights, other), make_requests(other, config.vocab_size),
                           per_step=True)
    assert _bits(first[0]) != _bits(second[0])
