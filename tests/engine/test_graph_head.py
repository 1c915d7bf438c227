"""The decode graph's head (kernels/engine/graph_head.py) run eagerly on the CPU: its captured
draw, the eager redraw of truncating rows and the host copy give the eager sampler's tokens
and log-prob bits, row for row, for a batch that mixes plain, greedy, top-k and top-p rows;
and a draw that drifts from the eager sampler's arithmetic is seen."""
import dataclasses

import pytest
import torch

from gates.compare import assert_bitwise_equal
from kernels.contract import load_contract
from kernels.contract.dispatch import RegionDispatch
from kernels.engine.graph_head import GraphHead, tensor_draw
from kernels.engine.pinned import ResultCopies
from kernels.ops.sampler import SamplingParams

VOCAB = 300


class _LogitsModel:
    """Stands in for a model: its 'hidden' rows already are the logits."""

    @staticmethod
    def logits(hidden, dispatch, case):
        return hidden


def _rows(seed: int, count: int):
    generator = torch.Generator().manual_seed(seed)
    kinds = [SamplingParams(1.0), SamplingParams(0.0), SamplingParams(0.7, top_k=20), SamplingParams(1.3, top_p=0.8)]
    params = [SamplingParams(k.temperature, k.top_k, k.top_p,
                             seed=int(torch.randint(0, 2**40, (1,), generator=generator)))
              for k in (kinds * count)[:count]]
    draws = [int(d) for d in torch.randint(0, 500, (count,), generator=generator)]
    logits = (3 * torch.randn(count, VOCAB, generator=generator)).to(torch.bfloat16)
    logits[1, :4] = logits[1].max()  # a greedy row with an exact tie: the lowest id must win
    return logits, params, draws


def _eager(contract, logits, params, draws):
    dispatch = RegionDispatch(contract)
    temperatures = torch.tensor([p.logprob_temperature for p in params], dtype=torch.float32)
    tokens = dispatch("sampler", "engine_graph", None, logits, params, draws)
    return tokens, dispatch("logprob", "engine_graph", None, logits, tokens, temperatures)


def _head(contract, logits, params, draws, size, draw=None):
    dispatch = RegionDispatch(contract)
    head = GraphHead(size, "cpu")
    head.fill(params, draws, size)
    padded = torch.cat([logits, logits[:size - len(params)]])  # padding rows: whatever the buffers hold
    captured = head.capture(_LogitsModel, dispatch, "engine_graph", padded,
                            draw or tensor_draw(dispatch, "engine_graph"))
    return ResultCopies.wait(ResultCopies(size).start(
        *head.redraw_truncated(dispatch, "engine_graph", captured, params, draws)))


@pytest.mark.parametrize("contract_name", ["consistent", "fast"])
def test_graph_head_gives_the_eager_samplers_bits(fresh_seed, contract_name):
    contract = load_contract(contract_name)
    logits, params, draws = _rows(fresh_seed, 11)
    tokens, logprobs = _head(contract, logits, params, draws, size=16)
    want_tokens, want_logprobs = _eager(contract, logits, params, draws)
    assert tokens[1] == 0, f"seed {fresh_seed}: greedy tie went to token {tokens[1]}"
    if contract_name == "fast":  # its draw is keyed by the whole batch: only the untruncated rows match
        plain = [i for i, p in enumerate(params) if p.top_k == 0 and p.top_p == 1.0]
        assert [tokens[i] for i in plain] == [int(want_tokens[i]) for i in plain], f"seed {fresh_seed}"
        return
    assert tokens == want_tokens.tolist(), f"seed {fresh_seed}"
    assert_bitwise_equal(torch.tensor(logprobs, dtype=torch.float32), want_logprobs, f"seed {fresh_seed}")


def test_graph_head_sees_a_draw_that_is_not_the_eager_one(fresh_seed):
    contract = load_contract("consistent")
    logits, params, draws = _rows(fresh_seed, 64)  # 16 rows drawn in the graph: all agreeing by chance ~1e-13
    drifted = tensor_draw(RegionDispatch(contract), "engine_graph")

    def keyed_off_by_one(x, greedy, keys, temperatures):
        return drifted(x, greedy, keys + 1, temperatures)

    tokens, _ = _head(contract, logits, params, draws, size=64, draw=keyed_off_by_one)
    assert tokens != _eager(contract, logits, params, draws)[0].tolist(), f"seed {fresh_seed}"


def test_a_sampler_without_a_tensor_form_is_not_captured():
    from kernels.ops import registry
    registry.register_variant("sampler", "test_untensored", lambda logits, params, draws: logits.argmax(-1))
    contract = load_contract("consistent")
    binding = contract.bindings[("sampler", "engine_graph")]
    contract.bindings[("sampler", "engine_graph")] = dataclasses.replace(binding, impl="sampler.test_untensored")
    assert tensor_draw(RegionDispatch(contract), "engine_graph") is None
