"""Door tracing: row digests map rows to tokens the same way on both runtimes, truncated
digests tell how many leading mantissa bits agree, and tracing a path that does not run (a
replayed CUDA graph) is refused."""
import json

import pytest
import torch

from gates.workload import Workload, make_engine, make_requests, seeded_weights
from harness.trace import Tracer, TraceRefused, row_digests, truncation_levels
from harness.trace_compare import first_divergence, read_trace
from kernels.contract import load_contract
from kernels.contract.dispatch import DoorCall
from kernels.models.config import load_model_config
from kernels.trainer.logprobs import scored_sequences
from kernels.trainer.trainer import Trainer


def test_truncated_digests_agree_above_the_flipped_bit(fresh_seed):
    rows = torch.randn(4, 32, generator=torch.Generator().manual_seed(fresh_seed))
    flipped = rows.clone()
    flipped.view(torch.int32)[2, 5] ^= 1 << 9  # mantissa bit 9 of 23: the top 13 bits still agree
    assert truncation_levels([rows]) == (16, 10, 7, 4, 0)
    assert row_digests([rows], 4)[2] != row_digests([flipped], 4)[2]
    assert row_digests([rows], 4)[:2] == row_digests([flipped], 4)[:2]
    assert row_digests([rows], 4, keep=16)[2] != row_digests([flipped], 4, keep=16)[2]
    assert row_digests([rows], 4, keep=10)[2] == row_digests([flipped], 4, keep=10)[2]
    negative_zero = torch.zeros(1, 3)
    negative_zero[0, 1] = -0.0
    assert row_digests([negative_zero], 1) != row_digests([torch.zeros(1, 3)], 1)  # bits, not values


def test_engine_and_trainer_rows_map_to_the_same_tokens(tmp_path, fresh_seed):
    config, contract = load_model_config("nemotron-cut"), load_contract("consistent")
    weights = seeded_weights(config, fresh_seed % 1000)
    workload = Workload(num_sequences=3, new_tokens=5, min_prompt_len=4, max_prompt_len=20,
                        arrival_spread=3, seed=fresh_seed)
    engine = make_engine(config, contract, weights, workload)
    trainer = Trainer(config, contract, weights=weights, micro_batch_size=2)  # two micro-batches
    engine_tracer = Tracer(tmp_path, "engine").attach(engine)
    trainer_tracer = Tracer(tmp_path, "trainer", sequence_ids="running").attach(trainer)
    completions = engine.generate(make_requests(workload, config.vocab_size))
    trainer.score(scored_sequences(completions))
    engine_tracer.close(), trainer_tracer.close()
    _, engine_rows, _ = read_trace(tmp_path / "engine.jsonl")
    order, trainer_rows, _ = read_trace(tmp_path / "trainer.jsonl")
    lengths = [len(c.request.prompt) + len(c.tokens) for c in completions]
    expected = {(s, p) for s, n in enumerate(lengths) for p in range(n)}
    for region in ("embed", "attention", "ssm_scan", "moe_combine"):
        door = next(d for d in order if d[1] == region)
        assert set(trainer_rows[door]) == expected
        assert set(engine_rows[door]) == expected - {(s, n - 1) for s, n in enumerate(lengths)}  # last never fed
    head = next(d for d in order if d[1] == "logprob")
    assert set(engine_rows[head]) == set(trainer_rows[head])  # rows predicting each completion token
    assert first_divergence(tmp_path / "engine.jsonl", tmp_path / "trainer.jsonl")[0] is None
    manifest = json.loads((tmp_path / "engine.manifest.json").read_text())
    assert 0 < manifest["num_forwards"] <= engine.step_count and "weight_quant" in manifest["regions_hooked"]
    assert engine.dispatch.observers == [] and trainer.dispatch.observers == []  # close() detaches


def test_tracing_a_replayed_graph_is_refused(tmp_path):
    config, contract = load_model_config("qwen3-cut"), load_contract("consistent")
    engine = make_engine(config, contract, seeded_weights(config), Workload(num_sequences=1, new_tokens=2))
    engine.replays_cuda_graphs = True
    with pytest.raises(TraceRefused, match="CUDA graphs"):
        Tracer(tmp_path, "engine").attach(engine)
    call = DoorCall("o_proj", "engine_graph", 0, (), {}, torch.ones(2, 2))
    with pytest.raises(TraceRefused, match="engine_graph"):
        Tracer(tmp_path, "engine")(call)
