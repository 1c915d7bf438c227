"""The contract loader: both shipped contracts load; every malformed contract is a clear
error at load time; constants are exact; identities are stable and sensitive."""
import dataclasses

import pytest
import yaml

from kernels.contract import ContractError, load_contract
from kernels.contract.constants import decode_constant, encode_float
from kernels.contract.identity import identities, numerical_policy_identity, semantic_identity
from kernels.contract.regions import CASES, REGION_FAMILY
from kernels.models.config import CONFIG_DIR, load_model_config
from kernels.models.registry import build_model
from kernels.ops import registry


@pytest.mark.parametrize("name", ["fast", "consistent"])
def test_shipped_contract_maps_every_region_and_case(name):
    contract = load_contract(name)
    assert set(contract.bindings) == {(r, c) for r in REGION_FAMILY for c in CASES}
    for (region, case), binding in contract.bindings.items():
        function = contract.op(region, case)
        assert function.func is registry.implementation(binding.impl), (region, case)
        assert function.keywords == dict(binding.constants), (region, case)


def _consistent_document():
    return yaml.safe_load(open(load_contract("consistent").source).read())


def _write(tmp_path, document):
    path = tmp_path / "contract.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["regions"]["attention"].pop("engine_decode"), "missing cases ['engine_decode']"),
    (lambda d: d["regions"]["norm"]["engine_prefill"].update(impl="norm.magic"), "unknown implementation 'norm.magic'"),
    (lambda d: d["regions"]["norm"].update(engine_prefill={"impl": "linear.consistent",
                                                           "constants": {"row_multiple": 8}}),
     "is not a norm implementation"),
    (lambda d: d["regions"]["qkv_proj"].update(engine_prefill={"impl": "linear.consistent",
                                                               "constants": {"row_multiple": 8.0}}),
     "constant 'row_multiple' is an integer; write 8, not 8.0"),
    (lambda d: d["regions"]["qkv_proj"].update(engine_prefill={"impl": "linear.consistent"}), "takes constants"),
    (lambda d: d["regions"]["qkv_proj"].update(engine_prefill={"impl": "linear.consistent",
                                                               "constants": {"row_multiple": 8, "tile": 4}}),
     "takes constants"),
    (lambda d: d["regions"].update(warp_drive=d["regions"]["norm"]), "unknown region 'warp_drive'"),
    (lambda d: d["regions"]["norm"].update(engine_turbo=d["regions"]["norm"]["engine_prefill"]), "unknown cases"),
    (lambda d: d.update(claims={"faster_than_light": "all"}), "unknown claim"),
    (lambda d: d.pop("regions"), "'name' and 'regions'"),
    (lambda d: d.update(regions=["norm"]), "regions: must be a non-empty mapping"),
    (lambda d: d.update(name=7), "name: must be a non-empty string"),
    (lambda d: d["regions"]["qkv_proj"].update(engine_prefill={"impl": "linear.consistent",
                                                               "constants": {"row_multiple": 0}}),
     "must be a positive integer"),
    (lambda d: d["regions"]["qkv_proj"].update(engine_prefill={"impl": "linear.consistent",
                                                               "constants": {"row_multiple": True}}),
     "must be a positive integer"),
    (lambda d: d["regions"]["qkv_proj"].update(engine_prefill={"impl": "linear.consistent",
                                                               "constants": {"row_multiple": "eight"}}),
     "must be a positive integer"),
    (lambda d: d.update(claims={"tp_sizes": "all"}), "list of positive integers"),
    (lambda d: d.update(claims={"batch_invariant": ["norm", "warp_core"]}), "list of known regions"),
])
def test_malformed_contract_is_a_clear_error(tmp_path, mutate, message):
    document = _consistent_document()
    mutate(document)
    with pytest.raises(ContractError, match=message.replace("[", r"\[").replace("]", r"\]")) as raised:
        load_contract(_write(tmp_path, document))
    assert str(tmp_path) in str(raised.value)


def test_duplicate_keys_are_refused(tmp_path):
    text = open(load_contract("consistent").source).read().replace("regions:\n", "regions:\n  norm: {}\n", 1)
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(ContractError, match="duplicate key 'norm'"):
        load_contract(path)


def test_unknown_contract_name_and_unreadable_yaml(tmp_path):
    with pytest.raises(ContractError, match="unknown contract 'turbo'"):
        load_contract("turbo")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    with pytest.raises(ContractError, match="cannot read contract") as raised:
        load_contract(broken)
    message = str(raised.value)
    assert message.startswith(f"cannot read contract {broken}: ") and "<unicode string>" not in message
    assert f'in "{broken}", line 1' in message  # the parser's marks name the file
    with pytest.raises(ContractError, match="is a directory"):
        load_contract(tmp_path)
    with pytest.raises(ContractError, match="no such contract file"):
        load_contract(tmp_path / "nowhere.yaml")


def test_float_constants_round_trip_exactly():
    for value in (1.0, 0.1, 448.0, 2.0 ** -149, -0.0):
        for kind in ("f32", "f64"):
            text = encode_float(value, kind)
            decoded = decode_constant("x", text)
            assert encode_float(decoded, kind) == text
    assert decode_constant("x", "f32:0x3f800000") == 1.0
    with pytest.raises(ValueError, match="8 hex digits"):
        decode_constant("x", "f32:0x3f80")
    with pytest.raises(ValueError, match="decimal float"):
        decode_constant("eps", 1e-6)


def test_identities_are_stable_and_sensitive():
    config = load_model_config("qwen3-cut")
    weights = build_model(config, 0).state_dict()
    consistent = load_contract("consistent")
    first = identities(config, weights, consistent)
    assert first == identities(config, build_model(config, 0).state_dict(), load_contract("consistent"))
    assert semantic_identity(config, build_model(config, 1).state_dict()) != first["semantic"]
    assert semantic_identity(dataclasses.replace(config, rms_norm_eps=1e-5), weights) != first["semantic"]
    assert numerical_policy_identity(load_contract("fast")) != first["numerical_policy"]
    flipped = dict(weights)
    name = next(iter(flipped))
    flipped[name] = flipped[name].clone()
    flipped[name].view(-1)[0] = -flipped[name].view(-1)[0]
    assert semantic_identity(config, flipped) != first["semantic"]



@pytest.mark.parametrize("change, message", [
    ({"head_dim": 63}, "head_dim: must be even"),
    ({"dtype": "float8"}, "dtype"),
    ({"num_kv_heads": 3}, "num_heads: must be a multiple"),
    ({"rope_theta": -1.0}, "rope_theta: must be positive"),
    ({"warp": 9}, r"unknown fields \['warp'\]"),
    ({"rms_norm_eps": "1e-6"}, "write 1.0e-6"),
    ({"num_layers": True}, "num_layers must be int"),
    ({"tie_word_embeddings": "no"}, "tie_word_embeddings must be bool"),
])
def test_model_config_errors_name_the_field(tmp_path, change, message):
    document = yaml.safe_load((CONFIG_DIR / "qwen3-cut.yaml").read_text())
    document.update(change)
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ValueError, match=message):
        load_model_config(path)
    with pytest.raises(ValueError, match="unknown model config 'gpt5'"):
        load_model_config("gpt5")


def test_full_size_config_matches_the_published_shape():
    config = load_model_config("qwen3-1.7b")
    assert (config.num_layers, config.hidden_size, config.num_heads, config.num_kv_heads,
            config.head_dim, config.intermediate_size, config.vocab_size) == (28, 2048, 16, 8, 128, 6144, 151936)
    assert config.tie_word_embeddings and config.rope_theta == 1e6


def test_numerical_policy_covers_shared_helpers_and_the_model():
    from kernels.contract.identity import KERNELS_DIR, policy_source_files

    covered = {str(p.relative_to(KERNELS_DIR)) for p in policy_source_files()}
    assert {"ops/reduction.py", "ops/padding.py", "models/qwen3.py", "trainer/logprobs.py", "contract/dispatch.py",
            "trainer/data_parallel.py", "layout/tree.py"} <= covered
