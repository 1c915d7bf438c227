"""The rollout engine: paged cache, continuous batching with chunked prefill, weight sync,
per-request sampling; and that its consistent results do not depend on scheduling."""
import pytest
import torch

from gates.compare import assert_bitwise_equal
from gates.workload import seeded_weights
from kernels.contract import load_contract
from kernels.engine.cache import PagedKVCache
from kernels.engine.engine import Engine
from kernels.engine.graphs import graphs_unsupported
from kernels.engine.request import Request
from kernels.models.batch import Segment
from kernels.models.config import load_model_config
from kernels.ops.sampler import SamplingParams
from kernels.trainer.logprobs import ScoredSequence
from kernels.trainer.trainer import Trainer

CONFIG = load_model_config("qwen3-cut")


def _requests(seed, count=6, new_tokens=12, spread=5):
    generator = torch.Generator().manual_seed(seed)
    requests = []
    for index in range(count):
        length = int(torch.randint(3, 60, (1,), generator=generator))
        prompt = tuple(int(t) for t in torch.randint(1, CONFIG.vocab_size, (length,), generator=generator))
        arrival = int(torch.randint(0, spread, (1,), generator=generator))
        requests.append(Request(index, prompt, new_tokens, SamplingParams(0.9, seed=seed + index),
                                arrival_step=arrival))
    return requests


def test_paged_cache_reads_back_writes_and_poisons_free_slots(fresh_seed):
    torch.manual_seed(fresh_seed)
    cache = PagedKVCache(num_layers=2, num_blocks=6, block_size=4, num_kv_heads=2, head_dim=8,
                         dtype=torch.float32)
    cache.reserve(7, 10)
    assert cache.num_free_blocks == 3
    layer = cache.kv(1)
    k, v = torch.randn(10, 2, 8), torch.randn(10, 2, 8)
    layer.write(Segment(7, 0, 6, 0, "engine_prefill"), k[:6], v[:6])
    layer.write(Segment(7, 6, 4, 0, "engine_decode"), k[6:], v[6:])
    keys, values = layer.read(Segment(7, 6, 4, 0, "engine_decode"))
    assert_bitwise_equal(keys, k, "keys")
    assert_bitwise_equal(values, v, "values")
    assert torch.isnan(cache.kv(0).read(Segment(7, 0, 3, 0, "engine_prefill"))[0]).all()
    with pytest.raises(RuntimeError, match="KV cache full"):
        cache.reserve(8, 20)
    cache.release(7)
    assert cache.num_free_blocks == 6 and torch.isnan(cache.keys).all()


def test_rows_a_fused_kernel_wrote_are_not_written_again_and_no_others_are_skipped(fresh_seed):
    """write_segments skips only the very (segments, k, v) marked written (the fused q/k norm +
    RoPE wrote them on CUDA); other tensors or segments are written as always. Where no kernel
    can write (CPU), write_target says so."""
    torch.manual_seed(fresh_seed)
    cache = PagedKVCache(num_layers=1, num_blocks=4, block_size=4, num_kv_heads=2, head_dim=8, dtype=torch.float32)
    cache.reserve(3, 6)
    segments = (Segment(3, 0, 6, 0, "engine_prefill"),)
    layer = cache.kv(0)
    k, v = torch.randn(6, 2, 8), torch.randn(6, 2, 8)
    assert layer.write_target(segments, v) is None
    layer.mark_written(segments, k, v)
    layer.write_segments(segments, k, v)
    assert cache.keys.isnan().all() and cache.values.isnan().all(), "marked rows were written again"
    layer.write_segments(segments, k.clone(), v)
    keys, values = layer.read(segments[0])
    assert_bitwise_equal(keys, k, "keys of other tensors")
    assert_bitwise_equal(values, v, "values of other tensors")


def test_scheduler_chunks_prefill_and_mixes_it_with_decodes(fresh_seed):
    engine = Engine(CONFIG, load_contract("consistent"), seeded_weights(CONFIG),
                    max_tokens_per_step=16, max_running=4)
    completions = engine.generate(_requests(fresh_seed))
    assert all(len(c.tokens) == 12 for c in completions)
    assert engine.step_phases[("decode", "prefill")] > 0, engine.step_phases
    assert engine.step_phases[("decode",)] > 0, engine.step_phases
    assert engine.cache.num_free_blocks == engine.cache.num_blocks


def test_consistent_results_do_not_depend_on_scheduling(fresh_seed):
    weights, contract = seeded_weights(CONFIG), load_contract("consistent")
    requests = _requests(fresh_seed)
    crowd = Engine(CONFIG, contract, weights, max_tokens_per_step=24, max_running=6).generate(requests)
    for request, together in zip(requests, crowd):
        alone = Engine(CONFIG, contract, weights, max_tokens_per_step=5).generate(
            [Request(request.request_id, request.prompt, request.max_new_tokens, request.params)])[0]
        assert alone.tokens == together.tokens, f"seed {fresh_seed}: request {request.request_id}"
        assert_bitwise_equal(alone.logprob_tensor, together.logprob_tensor, f"request {request.request_id}")


def test_weight_sync_mid_generation_drops_the_cache_and_recomputes(fresh_seed):
    """After a sync to new weights, every later token's log-prob is what the trainer computes
    with the new weights for prompt + tokens so far: stale KV would show up as a difference."""
    old, new, contract = seeded_weights(CONFIG, 0), seeded_weights(CONFIG, 1), load_contract("consistent")
    requests = _requests(fresh_seed, count=4, spread=1)
    engine = Engine(CONFIG, contract, old, max_tokens_per_step=32)
    for request in requests:
        engine.add_request(request)
    done = {}
    for _ in range(6):
        done.update({c.request.request_id: c for c in engine.step()})
    generated_before = {s.request.request_id: len(s.completion.tokens) for s in engine.scheduler.running}
    assert any(0 < n < 12 for n in generated_before.values()), "no sequence was mid-generation"
    engine.load_weights(new)
    assert engine.weight_version == 1
    while engine.has_work():
        done.update({c.request.request_id: c for c in engine.step()})
    trainer = Trainer(CONFIG, contract, weights=new)
    for request_id, split in generated_before.items():
        completion = done[request_id]
        after = trainer.score([ScoredSequence(completion.request.prompt + tuple(completion.tokens[:split]),
                                              tuple(completion.tokens[split:]), 0.9)])[0]
        assert_bitwise_equal(completion.logprob_tensor[split:], after,
                             f"seed {fresh_seed}: request {request_id} after the sync")


def test_requests_that_cannot_run_are_refused():
    engine = Engine(CONFIG, load_contract("consistent"), seeded_weights(CONFIG), num_blocks=4, block_size=16)
    engine.add_request(Request(1, (1, 2, 3), 4))
    with pytest.raises(ValueError, match="already in the engine"):
        engine.add_request(Request(1, (4, 5), 4))
    with pytest.raises(ValueError, match="needs 5 KV blocks"):
        engine.add_request(Request(2, tuple(range(1, 70)), 8))
    with pytest.raises(ValueError, match="reaches position 4099; qwen3 has positions below 4096"):
        engine.add_request(Request(3, (1, 2, 3, 4), CONFIG.max_position))


def test_cuda_graphs_are_refused_where_they_cannot_replay():
    """On the CPU (for either family: Mamba layers no longer keep a model out), and across
    processes, whose collectives a graph does not capture."""
    for config in (CONFIG, load_model_config("nemotron-cut")):
        with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
            Engine(config, load_contract("consistent"), seeded_weights(config), cuda_graphs=True)
    assert graphs_unsupported(load_model_config("nemotron-cut"), None) is None
    assert "collectives are not captured" in graphs_unsupported(CONFIG, object())


def test_a_mixed_step_calls_attention_once_per_case_and_names_its_rows(fresh_seed):
    """A step holding prefill chunks and decodes: one attention call per case, over that
    case's segments renumbered from row 0, its rows named to observers; the rows come back
    in batch order and equal the same sequences run alone."""
    calls = []
    engine = Engine(CONFIG, load_contract("consistent"), seeded_weights(CONFIG), max_tokens_per_step=40,
                    observers=[lambda call: calls.append(call) if call.region == "attention" else None])
    alone = Engine(CONFIG, load_contract("consistent"), seeded_weights(CONFIG), max_running=1)
    requests = _requests(fresh_seed, count=5, new_tokens=6, spread=3)
    mixed = engine.generate(requests)
    for request, completion in zip(requests, mixed):
        single = alone.generate([request])[0]
        assert single.tokens == completion.tokens
        assert_bitwise_equal(completion.logprob_tensor, single.logprob_tensor, f"request {request.request_id}")
    grouped = [c for c in calls if c.rows is not None]
    assert grouped, "no step mixed prefill and decode: the workload did not exercise case groups"
    for call in grouped:
        segments = call.args[3]
        assert {s.case for s in segments} == {call.case} and segments[0].row == 0
        assert call.rows.shape[0] == sum(s.length for s in segments) == call.output.shape[0]


def test_a_forward_builds_its_host_tables_once_per_case_group(fresh_seed, monkeypatch):
    """Every layer of a forward asks for its case groups and the paged tables of each: they are
    built once per forward and group (host lists and host-to-device copies per layer and call
    made a GPU's mixed steps 10x slower than a graphed decode), and a change to the block
    tables still rebuilds them. Negative control: the step tables forgotten at every call."""
    built = []
    build = PagedKVCache.step_tables

    def counted(cache, segments):
        known = cache._step_tables.get(segments)
        tables = build(cache, segments)
        if tables is not known:
            built.append((cache.version, segments))
        return tables

    monkeypatch.setattr(PagedKVCache, "step_tables", counted)
    engine = Engine(CONFIG, load_contract("consistent"), seeded_weights(CONFIG), max_tokens_per_step=40)
    engine.generate(_requests(fresh_seed, count=5, new_tokens=6, spread=3))
    assert engine.step_phases[("decode", "prefill")] > 0, engine.step_phases
    assert len(built) == len(set(built)), "a forward rebuilt tables it had built for the same segments"
    assert len(built) < 2 * sum(engine.step_phases.values()), (len(built), engine.step_phases)
    monkeypatch.setattr(PagedKVCache, "step_tables", lambda cache, segments: (cache._step_tables.clear(),
                                                                              counted(cache, segments))[1])
    built.clear()
    engine.generate(_requests(fresh_seed, count=5, new_tokens=6, spread=3))
    assert len(built) > len(set(built))


def test_weight_sync_changes_the_policy_and_rejects_wrong_names():
    contract = load_contract("consistent")
    engine = Engine(CONFIG, contract, seeded_weights(CONFIG, 0))
    before = engine.identities()["semantic"]
    engine.load_weights(seeded_weights(CONFIG, 1))
    assert engine.identities()["semantic"] != before
    with pytest.raises(ValueError, match="names differ"):
        engine.load_weights({"embed_tokens": torch.zeros(1)})
    wrong_dtype = {k: v.float() for k, v in seeded_weights(CONFIG, 1).items()}
    with pytest.raises(ValueError, match="the engine holds"):
        engine.load_weights(wrong_dtype)


def test_bad_requests_are_clear_errors():
    with pytest.raises(ValueError, match="prompt must not be empty"):
        Request(0, (), 4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        Request(0, (1, 2), 0)
    for bad, message in (({"temperature": -1.0}, "temperature"), ({"top_k": -2}, "top_k"),
                         ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p")):
        with pytest.raises(ValueError, match=message):
            SamplingParams(**bad)


def test_full_distribution_is_returned_and_agrees_with_the_sampled_log_prob(fresh_seed):
    request = Request(0, tuple(range(5, 25)), 6, SamplingParams(0.8, top_k=20, seed=fresh_seed),
                      return_full_logprobs=True)
    completion = Engine(CONFIG, load_contract("consistent"), seeded_weights(CONFIG)).generate([request])[0]
    assert len(completion.full_logprobs) == 6
    for token, logprob, row in zip(completion.tokens, completion.logprobs, completion.full_logprobs):
        assert row.shape == (CONFIG.vocab_size,)
        assert_bitwise_equal(row[token], torch.tensor(logprob, dtype=torch.float32),
                             f"seed {fresh_seed}: full row vs sampled log-prob")
