"""The engine's look-ahead (kernels/engine/engine.py): a decode step launched before the one
before it is collected, its token ids read on the device. Under the consistent contract the
completions are bit for bit those of a step-by-step engine, on the dense and the hybrid cut,
with sequences that end on their stop token while a step is launched ahead (their rows are
dropped), full log-prob rows, truncating samplers and a weight sync mid-run; a look-ahead fed
the wrong tokens is seen."""
import pytest
import torch

from gates.compare import assert_bitwise_equal
from gates.workload import seeded_weights
from kernels.contract import load_contract
from kernels.engine.engine import Engine
from kernels.engine.request import Request
from kernels.models.config import load_model_config
from kernels.ops.sampler import SamplingParams

NEW_TOKENS = 14
KINDS = (SamplingParams(0.9), SamplingParams(0.0), SamplingParams(0.8, top_k=30), SamplingParams(1.1, top_p=0.85))


def _requests(config, seed, stops=None, count=6):
    generator = torch.Generator().manual_seed(seed)
    requests = []
    for index in range(count):
        length = int(torch.randint(3, 40, (1,), generator=generator))
        prompt = tuple(int(t) for t in torch.randint(1, config.vocab_size, (length,), generator=generator))
        kind = KINDS[index % len(KINDS)]
        params = SamplingParams(kind.temperature, kind.top_k, kind.top_p, seed=seed + index)
        requests.append(Request(index, prompt, NEW_TOKENS + index % 3, params, arrival_step=index % 2,
                                stop_token=(stops or {}).get(index), return_full_logprobs=index == 1))
    return requests


def _stops(completions) -> dict:
    """A stop token for every other request: a token it draws mid-run, so it ends early."""
    return {c.request.request_id: c.tokens[4 + c.request.request_id % 3] for c in completions
            if c.request.request_id % 2 == 0}


def _engine(config, weights, look_ahead, engine_class=Engine):
    return engine_class(config, load_contract("consistent"), weights, max_tokens_per_step=256, max_running=8,
                        look_ahead=look_ahead)


def _assert_same(want, got, label):
    for a, b in zip(want, got):
        assert a.tokens == b.tokens, f"{label}: request {a.request.request_id} tokens differ"
        assert_bitwise_equal(a.logprob_tensor, b.logprob_tensor, f"{label}: request {a.request.request_id}")
        assert len(a.full_logprobs) == len(b.full_logprobs)
        for step, (x, y) in enumerate(zip(a.full_logprobs, b.full_logprobs)):
            assert_bitwise_equal(x, y, f"{label}: request {a.request.request_id} full row {step}")


@pytest.mark.parametrize("name", ["qwen3-cut", "nemotron-cut"])
def test_look_ahead_gives_the_step_by_step_engines_bits(fresh_seed, name):
    config = load_model_config(name)
    weights = seeded_weights(config, fresh_seed % 1000)
    free = _engine(config, weights, False).generate(_requests(config, fresh_seed))
    requests = _requests(config, fresh_seed, _stops(free))
    want = _engine(config, weights, False).generate(requests)
    assert any(len(c.tokens) < c.request.max_new_tokens for c in want), "no request ended on its stop token"
    ahead = _engine(config, weights, True)
    got = ahead.generate(requests)
    _assert_same(want, got, f"seed {fresh_seed}, {name}")
    assert ahead.steps_launched_ahead > 0, "no step was launched ahead"
    assert ahead.rows_dropped > 0, "no row of a step launched ahead belonged to a sequence that had ended"
    assert ahead.cache.num_free_blocks == ahead.cache.num_blocks


def test_a_weight_sync_drops_the_step_launched_ahead(fresh_seed):
    config = load_model_config("qwen3-cut")
    old, new = seeded_weights(config, 0), seeded_weights(config, 1)
    requests = _requests(config, fresh_seed)
    results = []
    for look_ahead in (False, True):
        engine = _engine(config, old, look_ahead)
        for request in requests:
            engine.add_request(request)
        done = {}
        for _ in range(5):
            done.update({c.request.request_id: c for c in engine.step()})
        if look_ahead:
            assert engine._ahead is not None, "no step was launched ahead when the weights changed"
        engine.load_weights(new)
        while engine.has_work():
            done.update({c.request.request_id: c for c in engine.step()})
        results.append([done[r.request_id] for r in requests])
    _assert_same(*results, f"seed {fresh_seed}, weight sync")


class _WrongTokensAhead(Engine):
    """A planted fault: the step launched ahead reads its neighbour row's token."""

    def _launch(self, work, device_tokens=None):
        return super()._launch(work, None if device_tokens is None else device_tokens.roll(1))


def test_a_look_ahead_fed_the_wrong_tokens_is_seen(fresh_seed):
    config = load_model_config("qwen3-cut")
    weights = seeded_weights(config, fresh_seed % 1000)
    requests = _requests(config, fresh_seed)
    want = _engine(config, weights, False).generate(requests)
    got = _engine(config, weights, True, _WrongTokensAhead).generate(requests)
    with pytest.raises(AssertionError):
        _assert_same(want, got, "planted")


def test_observers_refuse_a_look_ahead():
    config = load_model_config("qwen3-cut")
    with pytest.raises(ValueError, match="look_ahead"):
        Engine(config, load_contract("consistent"), look_ahead=True, observers=(object(),))
