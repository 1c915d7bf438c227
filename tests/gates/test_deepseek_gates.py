"""The gates on `--model deepseek` (the DeepSeek-V4 cut and its quantized cut). Through `harness
gates`, under the consistent contract: C04 (with the indexer's block Top-K and the hash router's
weights) and C08 (the indexer's selection-only parameters n/a with the reason, every other gradient
checked) pass; the fast contract and each planted selection fault fail C04's rule of their own
region. Without a gate run: C03 places its chunks either side of the compressor's window (the
config's state_window); C02's comparison of per-sequence calls keys them within the probe's own
sequence and shows a difference there; C10 is n/a while the frozen CPU baseline predates the family
(its tree does not ship the model), and so is `harness run`'s profile stage. The rest, C02
included, pass in `harness gates --model deepseek` (RESULTS.md), and the fast contract's phases and
engine/trainer bits differ (tests/models/test_deepseek.py, tests/harness/test_deepseek_end_to_end.py)."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from gates.baseline import ROOT, RUN_PATHS, read_frozen, tree_models
from gates.batch_runs import _rows_of
from gates.boundaries import boundaries
from gates.git_objects import export_commit
from harness.cli import main
from harness.stages import run as run_stage
from kernels.contract import load_contract
from kernels.models.batch import TokenBatch
from kernels.models.config import load_model_config
from tests.gates.test_gate_c04_c09 import _failed, _gates, _planted, _sized

BLOCK_RULE = _sized("deepseek", "block_topk follows the unique key (score, then the larger position), blocks by "
                    "position descending, -1 past them")
HASH_RULE = _sized("deepseek", "hash_topk weighs the table's experts over an fp32 slot-order sum")


def test_consistent_contract_passes_c04_and_c08(tmp_path):
    out = tmp_path / "consistent"
    main(["gates", "--model", "deepseek", "--only", "C4,C8", "--out", str(out)])
    results = {path.stem: json.loads(path.read_text()) for path in out.glob("C*.json")}
    assert {name: r["status"] for name, r in results.items()} == {"C04": "pass", "C08": "pass"}
    statuses = {c["name"]: c["status"] for c in results["C04"]["conditions"]}
    assert {statuses[name] for name in BLOCK_RULE | HASH_RULE} == {"pass"}
    hazards = next(c for c in results["C04"]["conditions"] if c["name"].startswith("[cut] block_topk: the inputs"))
    assert hazards["+0.0 and -0.0 tied at the k-th visible block"] > 0, hazards
    selection_only = [c for c in results["C08"]["conditions"] if c["status"] == "n/a"]
    assert selection_only and all(".indexer." in c["name"] for c in selection_only), selection_only
    assert any(".compressor." in c["name"] and c["status"] == "pass" for c in results["C08"]["conditions"])
    taken = next(c for c in results["C08"]["conditions"]
                 if c["name"] == "[cut-quant] the reference took every quantized path the config names")
    assert taken["status"] == "pass" and min(taken["straight_through_points"].values()) > 0, taken  # W8A8, KV


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


def _planted_together(tmp_path, plants) -> str:
    """consistent.yaml with each (region, plant) bound in every case, as a YAML file."""
    path = Path(_planted(tmp_path, *plants[0]))
    document = yaml.safe_load(path.read_text())
    for region, impl in plants[1:]:
        document["regions"][region] = {case: {"impl": impl} for case in document["regions"][region]}
    path.write_text(yaml.safe_dump(document))
    return str(path)


@pytest.mark.parametrize("plants, failing", [
    ("fast", BLOCK_RULE),
    ((("block_topk", "block_topk.planted_lowest_position_wins"), ("hash_topk", "hash_topk.planted_reverse_order")),
     BLOCK_RULE | HASH_RULE),
    ((("block_topk", "block_topk.planted_zero_signs_ranked"),), BLOCK_RULE),
])
def test_c04_fails_the_fast_contract_and_planted_selection_faults(tmp_path, plants, failing):
    """Every case agrees with every other (the plants are bound to all of them): each region's
    rule alone catches them. The fast contract also fails its other regions' rules."""
    chosen = plants if plants == "fast" else _planted_together(tmp_path, plants)
    _, results = _gates(tmp_path, "deepseek", "C4", chosen)
    failed = _failed(results["C04"])
    assert failing <= failed, failed
    if plants != "fast":
        assert failed == failing, failed


def test_the_profile_is_not_applicable_while_the_frozen_baseline_predates_the_family(tmp_path, capsys):
    """`harness profile` exits 1 with the reason; `harness run` marks its profile stage skipped, n/a
    with that reason (it crashed in the baseline worker before)."""
    assert main(["profile", "--model", "deepseek", "--out", str(tmp_path / "profile")]) == 1
    said = capsys.readouterr().err
    assert "ships no model 'deepseek'" in said and "Traceback" not in said, said
    state = SimpleNamespace(out=tmp_path / "run")
    status, detail = run_stage._profile(state, SimpleNamespace(model="deepseek", pairs=1))
    assert status == "skipped" and detail.startswith("n/a: the frozen baseline"), detail
