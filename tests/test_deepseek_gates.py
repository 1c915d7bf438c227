"""The gates on `--model deepseek` (the DeepSeek-V4 cut). Through `harness gates`, under the
consistent contract: C02 (its per-sequence calls compared whole) and C08 (the indexer's
selection-only parameters n/a with the reason, every other gradient checked) pass. Without a gate
run: C03 places its chunks either side of the compressor's window (the config's state_window);
C02's comparison of per-sequence calls keys them within the probe's own sequence and shows a
difference there; C10 is n/a while the frozen CPU baseline predates the family (its tree does not
ship the model). The rest pass in `harness gates --model deepseek` (RESULTS.md), and the fast
contract's phases and engine/trainer bits differ (tests/test_deepseek*.py)."""
import json

import torch

from gates.baseline import ROOT, RUN_PATHS, read_frozen, tree_models
from gates.batch_runs import _rows_of
from gates.boundaries import boundaries
from gates.git_objects import export_commit
from harness.cli import main
from kernels.contract import load_contract
from kernels.models.batch import TokenBatch
from kernels.models.config import load_model_config


def test_consistent_contract_passes_c02_and_c08(tmp_path):
    out = tmp_path / "consistent"
    main(["gates", "--model", "deepseek", "--only", "C2,C8", "--out", str(out)])
    results = {path.stem: json.loads(path.read_text()) for path in out.glob("C*.json")}
    assert {name: r["status"] for name, r in results.items()} == {"C02": "pass", "C08": "pass"}
    selection_only = [c for c in results["C08"]["conditions"] if c["status"] == "n/a"]
    assert selection_only and all(".indexer." in c["name"] for c in selection_only), selection_only
    assert any(".compressor." in c["name"] and c["status"] == "pass" for c in results["C08"]["conditions"])


def test_the_state_chunk_is_the_widest_compressor_window():
    config = load_model_config("deepseek-cut")
    assert boundaries(load_contract("consistent"), config)["ssm_chunk"] == config.compress_rate_hca == 8


def test_per_sequence_calls_are_compared_whole_within_the_probes_sequence():
    batch = TokenBatch.from_sequences([(7, 0, [1, 2, 3]), (9, 0, [4, 5])], "trainer_fwd")
    probe, other = batch.segments
    rows = torch.arange(5.0)[:, None]

    def calls(blocks):
        return [("norm", 0, (rows,), None), ("window_compress", 0, (blocks,), probe),
                ("window_compress", 0, (torch.ones(1, 2),), other)]
    seen = _rows_of(batch, calls(torch.zeros(2, 2)), 0)
    assert set(seen) == {"norm|0|0", "window_compress|0|seq 0"}  # the other sequence's call is not the probe's
    assert seen["window_compress|0|seq 0"][0]["shape"] == [2, 2]  # whole, not the probe's rows of it
    moved = _rows_of(batch, calls(torch.zeros(2, 2).nextafter(torch.ones(2, 2))), 0)
    assert moved["window_compress|0|seq 0"] != seen["window_compress|0|seq 0"]
    assert moved["norm|0|0"] == seen["norm|0|0"]


def test_c10_is_not_applicable_while_the_frozen_baseline_predates_the_family(tmp_path):
    frozen = read_frozen()
    models = tree_models(export_commit(frozen["commit"], tmp_path, ROOT, paths=RUN_PATHS))
    assert "qwen3" in models and "nemotron" in models  # read from that tree's own registry
    assert "deepseek" not in models, "the CPU baseline ships deepseek now: run C10 on it instead"
