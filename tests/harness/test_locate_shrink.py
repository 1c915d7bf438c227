"""`harness locate` and `harness shrink`: divergences planted at known regions (hence known
first layers) are named with their layer, region, case pair and token; the consistent
contract is clean; shrink's repro fails on its own and passes once the planted binding is
removed from the contract file; bad input is a clear error (exit 1)."""
import json

import pytest
import yaml

from harness.cli import EXIT_BAD_INPUT, EXIT_DIFFERENT, EXIT_INCONCLUSIVE, EXIT_OK, main
from harness.stages import locate as locate_stage
from harness.stages.shrink import run_repro, shrink
from kernels.contract import load_contract as load_contract_named
from kernels.contract.contract import CONTRACT_DIR
from kernels.models.config import load_model_config

# split-K whose partials are rounded to bf16 before they are added (in a drawn order): the
# fp32-partial split-K of linear.fast_split_k changes a bf16 output only where the fp32 sums
# straddle a rounding boundary (the cut's o_proj has K = 256: 1 element in ~30000), too rare
# for a fixed workload to show it whatever the sampler draws
SPLIT_K = {"impl": "linear.planted_atomic_split_k", "constants": {"num_splits": 4}}
ENGINE_CASES = ("engine_prefill", "engine_decode")
BF16_SPLIT_KV = {"impl": "attention.planted_bf16_split_kv", "constants": {"tokens_per_split": 8, "max_splits": 16}}
PLANTS = {  # name: (model, region, cases bound to the fault, binding, block type the region lives in)
    "ssm_scan-decode": ("nemotron", "ssm_scan", ("engine_decode",), {"impl": "ssm_scan.fast_recurrent"}, "M"),
    "moe_combine-order": ("nemotron", "moe_combine", ENGINE_CASES,
                          {"impl": "moe_combine.planted_bf16_reverse_order"}, "E"),
    "o_proj-atomic_split_k": ("nemotron", "o_proj", ENGINE_CASES, SPLIT_K, "*"),
    "mlp_act-two_roundings": ("qwen3", "mlp_act", ("engine_decode",), {"impl": "activation.fast"}, None),
    # decode attention is one call over every sequence of the step: the capture is cut to the
    # watched token's segment (harness/door_capture.py) and still reproduces. Its split
    # partials are rounded to bf16: fast_split_kv's fp32 merge moves too few bits for the
    # cut model's locate to meet one whatever the data (it met none on an AVX-512 machine)
    "attention-decode_split_kv": ("qwen3", "attention", ("engine_decode",), BF16_SPLIT_KV, None),
    # the same classes on the other cut: each forward plant is named on both models where the
    # model has the region (qwen3 has no Mamba or MoE, nemotron no SiLU(gate)*up region)
    "o_proj-atomic_split_k-qwen3": ("qwen3", "o_proj", ENGINE_CASES, SPLIT_K, None),
    "attention-decode_split_kv-nemotron": ("nemotron", "attention", ("engine_decode",), BF16_SPLIT_KV, "*"),
    # DeepSeek-V4's indexer projections split along K: first seen in the first CSA layer (1)
    "index_proj-atomic_split_k-deepseek": ("deepseek", "index_proj", ENGINE_CASES, SPLIT_K, "C"),
}


def _contract_file(path, region=None, cases=(), binding=None):
    """consistent.yaml, with `cases` of `region` bound to `binding` when given."""
    document = yaml.safe_load((CONTRACT_DIR / "consistent.yaml").read_text())
    document["name"] = "consistent-planted" if binding else "consistent-copy"
    for case in cases if binding else ():
        document["regions"][region][case] = binding
    path.write_text(yaml.safe_dump(document))
    return path


def _expected_layer(model, block):
    """The first layer holding the region: where a contract-wide plant shows first."""
    config = load_model_config(f"{model}-cut")
    pattern = getattr(config, "hybrid_override_pattern", None) or getattr(config, "layer_pattern", "")
    return 0 if block is None else pattern.index(block)


def _locate_json(capsys, argv):
    code = main(["locate", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_locate_names_each_planted_divergence(tmp_path, capsys, plant):
    model, region, cases, binding, block = PLANTS[plant]
    contract = _contract_file(tmp_path / "planted.yaml", region, cases, binding)
    code, result = _locate_json(capsys, ["--model", model, "--contract", str(contract), "--out", str(tmp_path / "loc")])
    assert code == EXIT_DIFFERENT and result["status"] == "divergent"
    assert (result["region"], result["layer"]) == (region, _expected_layer(model, block)), result
    assert result["cases"][0] in cases and result["cases"][1] == "trainer_fwd"
    assert {"sequence", "position"} <= set(result["token"])
    magnitude = result["magnitude"]
    assert magnitude["ulps"] >= 1 and 0 < magnitude["agreeing_leading_bits"] < magnitude["width_bits"]
    for side in ("engine", "trainer"):
        manifest = json.loads((tmp_path / "loc" / f"{side}.manifest.json").read_text())
        assert manifest["model"] == model and region in manifest["regions_hooked"] and manifest["num_lines"] > 0


def test_consistent_contract_is_clean(tmp_path, capsys):
    code, result = _locate_json(capsys, ["--model", "nemotron", "--out", str(tmp_path / "loc")])
    assert code == EXIT_OK and result["status"] == "clean", result
    assert result["doors_compared"] > 40 and result["logprob_figures"]["frac_tokens_differing"] == 0


def test_fast_contract_diverges_in_the_first_layer(tmp_path, capsys):
    code, result = _locate_json(capsys, ["--model", "qwen3", "--contract", "fast", "--out", str(tmp_path / "loc")])
    assert code == EXIT_DIFFERENT and result["layer"] in (None, 0), result


@pytest.mark.parametrize("plant", ["o_proj-atomic_split_k", "attention-decode_split_kv", "ssm_scan-decode",
                                   "index_proj-atomic_split_k-deepseek"])
def test_shrink_repro_fails_then_passes_once_the_plant_is_removed(tmp_path, plant):
    model, region, cases, binding, block = PLANTS[plant]
    contract = _contract_file(tmp_path / "planted.yaml", region, cases, binding)
    locate_stage.locate(model, str(contract), tmp_path / "run" / "locate")
    assert main(["shrink", str(tmp_path / "run" / "locate")]) == EXIT_OK
    repro_dir = next((tmp_path / "run" / "repros").iterdir())
    summary = json.loads((repro_dir / "repro.json").read_text())
    assert summary["repro_fails"] and summary["cut"]["confirmed"], summary
    assert {p.name for p in repro_dir.iterdir()} >= {"inputs.safetensors", "door_call.json", "test_repro.py",
                                                    "config.yaml", "repro.json"}
    cut = load_model_config(repro_dir / "config.yaml")
    if model == "nemotron":  # the divergent layer and its neighbours (one fewer at layer 0)
        assert len(cut.hybrid_override_pattern) in (2, 3) and summary["cut"]["confirmed"]
    elif model == "deepseek":  # layers 0 .. the divergent one + 1: the hash-routed layer 0 stays first
        assert cut.layer_pattern == "SCH" and cut.num_hash_layers == 1
    else:  # layers 0 .. the divergent one + 1
        assert cut.num_layers == _expected_layer(model, block) + 2
    door = json.loads((repro_dir / "door_call.json").read_text())
    if region == "attention":  # a decode step's call over many sequences, cut to one segment
        assert all(len(call["args"][3]["segments"]) == 1 for call in door.values()), door
    if region == "ssm_scan":  # the store saved as the watched sequence's state before the call
        assert all(len(call["args"][4]["segments"]) == 1 and "mamba_store" in call["args"][5]
                   for call in door.values()), door
    assert run_repro(repro_dir / "test_repro.py").returncode == 1  # fails on its own
    _contract_file(contract)  # the fix: the planted binding is gone from the same file
    fixed = run_repro(repro_dir / "test_repro.py")
    assert fixed.returncode == 0, fixed.stdout[-2000:]


def test_locate_is_as_wide_as_diff_before_it_says_clean(tmp_path, capsys, monkeypatch):
    """A decode fault that shows only past one key block of context (the walk's block doubled
    once the step's longest context passes 32): the narrow pass's contexts stop at 32 and see
    nothing; the wide pass crosses it, so locate must go on and name the door. The wide pass
    is cut to 12 sequences x 40 tokens here (contexts up to 120) to keep CI short."""
    monkeypatch.setattr(locate_stage, "WIDE_WORKLOAD", {"num_sequences": 12, "new_tokens": 40})
    binding = {"impl": "attention.planted_graph_baked_block_kv", "constants": {"block_kv": 32, "row_multiple": 8}}
    contract = _contract_file(tmp_path / "planted.yaml", "attention", ("engine_decode",), binding)
    code, result = _locate_json(capsys, ["--model", "qwen3", "--contract", str(contract),
                                         "--out", str(tmp_path / "loc")])
    assert result["passes"]["narrow"]["frac_tokens_differing"] == 0, "the fault must hide from the narrow pass"
    assert code == EXIT_DIFFERENT and result["region"] == "attention", result
    assert result["cases"][0] == "engine_decode" and (tmp_path / "loc" / "wide" / "engine.jsonl").exists()


def test_locate_reaches_past_a_split_that_starts_at_a_long_context(tmp_path, capsys, monkeypatch):
    """Decode attention that switches to a bf16 split once a context passes 200 tokens: the
    narrow and wide passes stop short of it (the wide one cut to contexts under 100 here), so
    the long pass, run one key block past the binding's largest constant, must name it."""
    monkeypatch.setattr(locate_stage, "WIDE_WORKLOAD", {"num_sequences": 8, "new_tokens": 16})
    binding = {"impl": "attention.planted_split_past_long_context",
               "constants": {"block_kv": 32, "row_multiple": 8, "long_context": 200, "tokens_per_split": 8,
                             "max_splits": 16}}
    contract = _contract_file(tmp_path / "planted.yaml", "attention", ("engine_decode",), binding)
    code, result = _locate_json(capsys, ["--model", "qwen3", "--contract", str(contract),
                                         "--out", str(tmp_path / "loc")])
    untraced = {name: figures["frac_tokens_differing"] for name, figures in result["passes"].items()}
    assert untraced["narrow"] == 0 and untraced["wide (diff's workload), untraced"] == 0, untraced
    assert code == EXIT_DIFFERENT and (result["region"], result["cases"][0]) == ("attention", "engine_decode"), result
    assert "long (past the attention's constants), traced" in result["passes"], result["passes"]
    assert (tmp_path / "loc" / "long" / "engine.jsonl").exists() and result["magnitude"]["ulps"] >= 1


def test_no_long_pass_where_the_attention_pins_nothing_past_diffs_contexts(tmp_path):
    """The shipped contracts pin nothing past diff's contexts: locate runs no third pass."""
    assert all(locate_stage._long_setting(load_contract_named(name), load_model_config("qwen3-cut"),
                                          locate_stage.Workload(), 0) is None for name in ("consistent", "fast"))


def test_inconclusive_when_no_traced_door_differs(tmp_path, monkeypatch):
    monkeypatch.setattr(locate_stage, "first_divergence", lambda *paths: (None, 0))
    monkeypatch.setattr(locate_stage, "WIDE_WORKLOAD", {"num_sequences": 8, "new_tokens": 16})
    result = locate_stage.locate("qwen3", "fast", tmp_path / "loc")
    assert result["status"] == "inconclusive" and locate_stage.EXIT_BY_STATUS["inconclusive"] == EXIT_INCONCLUSIVE


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    assert main(["locate", "--model", "llama", "--out", str(tmp_path / "x")]) == EXIT_BAD_INPUT
    assert "unknown model 'llama'" in capsys.readouterr().err
    assert main(["locate", "--model", "qwen3", "--config", "kernels/models/configs/nemotron-cut.yaml",
                 "--out", str(tmp_path / "x")]) == EXIT_BAD_INPUT
    assert "not qwen3" in capsys.readouterr().err
    assert main(["shrink", str(tmp_path / "missing")]) == EXIT_BAD_INPUT
    assert "no locate.json" in capsys.readouterr().err
    clean = tmp_path / "clean"
    locate_stage.locate("qwen3", "consistent", clean)
    assert main(["shrink", str(clean)]) == EXIT_BAD_INPUT
    assert "nothing to shrink" in capsys.readouterr().err
    stale = json.loads((clean / "locate.json").read_text())
    (clean / "locate.json").write_text(json.dumps({**stale, "status": "divergent", "commit": "0" * 40}))
    with pytest.raises(ValueError, match="traced at commit 000000000000"):
        shrink(clean, tmp_path / "repros")
