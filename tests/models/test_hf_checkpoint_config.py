"""What the checkpoint loader (kernels/models/hf_checkpoint.py) reads from a Hugging Face
config.json, and how it refuses what it cannot run: a config the model cannot run (rope type,
missing, null or mistyped fields, unsupported architectures), broken checkpoints (missing
files, truncated or misshapen tensors, a tensor in two files) and `harness diff --checkpoint`
mistakes must fail with the path and the problem named, in one line.
Tiny random models, CPU, no network: `python -m pytest tests/models/test_hf_checkpoint_config.py -q`.
"""
import json
import os
import re
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # set before transformers is imported

import pytest
from safetensors.torch import load_file, save_file

from kernels.models.hf_checkpoint import load_hf_checkpoint, qwen3_config_from_hf

pytest.importorskip("transformers")
from tests.tiny_checkpoints import save_tiny_qwen3  # noqa: E402


@pytest.fixture(scope="module")
def tied(tmp_path_factory):
    return save_tiny_qwen3(tmp_path_factory.mktemp("tied"), tie=True)


def _hf_config(**overrides):
    base = {"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "intermediate_size": 256, "vocab_size": 512, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True, "max_position_embeddings": 256}
    return {**base, **overrides}


def test_config_reads_rope_theta_and_dtype_in_both_layouts():
    v5 = _hf_config(dtype="bfloat16", rope_parameters={"rope_theta": 5e5, "rope_type": "default"})
    v4 = _hf_config(torch_dtype="bfloat16", rope_theta=5e5, rope_scaling=None)
    for hf_config in (v5, v4):
        config = qwen3_config_from_hf(hf_config)
        assert (config.rope_theta, config.dtype, config.max_position) == (5e5, "bfloat16", 256)
    assert qwen3_config_from_hf(v5, dtype="float32").dtype == "float32"


def test_config_rejects_what_the_model_cannot_run():
    yarn = {"rope_theta": 1e6, "rope_type": "yarn", "factor": 4.0}
    with pytest.raises(ValueError, match="rope_type"):
        qwen3_config_from_hf(_hf_config(dtype="float32", rope_parameters=yarn))
    with pytest.raises(ValueError, match="rope_theta"):
        qwen3_config_from_hf(_hf_config(dtype="float32"))
    with pytest.raises(ValueError, match="intermediate_size"):
        qwen3_config_from_hf(_hf_config(dtype="float32", rope_theta=1e6, intermediate_size=0))
    config = _hf_config(dtype="float32", rope_theta=1e6)
    del config["vocab_size"]
    with pytest.raises(ValueError, match="vocab_size"):
        qwen3_config_from_hf(config)


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_hf_checkpoint(tmp_path / "nowhere")


def test_a_file_named_as_the_checkpoint_is_not_called_missing(copied):
    with pytest.raises(ValueError, match="is a file; name the save_pretrained directory"):
        load_hf_checkpoint(copied / "config.json")


def test_missing_config_json(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_hf_checkpoint(tmp_path)


@pytest.fixture
def copied(tied, tmp_path):
    """A private copy of the tied checkpoint to break."""
    return shutil.copytree(tied[0], tmp_path / "checkpoint")


def test_llama_model_type_is_rejected(copied):
    config_path = copied / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "model_type": "llama"}))
    with pytest.raises(ValueError, match="model_type.*'llama'"):
        load_hf_checkpoint(copied)


def test_truncated_safetensors_names_the_file(copied):
    path = copied / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match="model.safetensors: corrupt or truncated"):
        load_hf_checkpoint(copied)


def test_missing_tensor_is_named(copied):
    path = copied / "model.safetensors"
    tensors = load_file(path)
    del tensors["model.layers.1.self_attn.k_norm.weight"]
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"missing tensors \['model.layers.1.self_attn.k_norm.weight'\]"):
        load_hf_checkpoint(copied)


def test_misshapen_tensor_is_named(copied):
    path = copied / "model.safetensors"
    tensors = load_file(path)
    name = "model.layers.0.self_attn.k_proj.weight"
    tensors[name] = tensors[name][:-1].contiguous()
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match="k_proj.weight.*qkv_proj"):
        load_hf_checkpoint(copied)


def test_config_refuses_conflicting_rope_settings():
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    conflicting = _hf_config(dtype="float32", rope_parameters={"rope_theta": 1e6, "rope_type": "default"},
                             rope_scaling=yarn)
    with pytest.raises(ValueError, match="rope_parameters .* and rope_scaling .* disagree"):
        qwen3_config_from_hf(conflicting)
    agreeing = _hf_config(dtype="float32", rope_parameters={"rope_theta": 1e6, "rope_type": "default"},
                          rope_scaling={"rope_type": "default"})
    assert qwen3_config_from_hf(agreeing).rope_theta == 1e6


@pytest.mark.parametrize("field, value", [("rms_norm_eps", None), ("hidden_size", "128"), ("num_hidden_layers", 2.5),
                                          ("vocab_size", True), ("rope_theta", None)])
def test_config_names_a_null_or_mistyped_field(field, value):
    with pytest.raises(ValueError, match=f"^{field}: expected"):
        qwen3_config_from_hf(_hf_config(dtype="float32", **({"rope_theta": 1e6} | {field: value})))


@pytest.mark.parametrize("model_type, named", [("qwen3_moe", "Qwen3-MoE"), ("qwen3_5_moe", "Qwen3.5-MoE")])
def test_unsupported_architectures_are_named(model_type, named):
    with pytest.raises(ValueError, match=f"'{model_type}' \\({re.escape(named)}\\) is not supported"):
        qwen3_config_from_hf(_hf_config(model_type=model_type, dtype="float32", rope_theta=1e6))


def test_a_config_json_that_is_not_an_object_is_refused(copied):
    (copied / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object of settings, got a list"):
        load_hf_checkpoint(copied)


def test_the_same_tensor_in_two_files_without_an_index_is_refused(copied):
    tensors = load_file(copied / "model.safetensors")
    name = "model.layers.0.mlp.up_proj.weight"
    save_file({name: tensors[name] + 1}, copied / "zz-extra.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=f"'{re.escape(name)}' is in both model.safetensors and zz-extra"):
        load_hf_checkpoint(copied)


@pytest.mark.parametrize("case, expected", [
    ("wrong family", "holds a qwen3 checkpoint"), ("moe", "Qwen3-MoE"), ("missing", "does not exist"),
    ("neither", "give --model")])
def test_diff_checkpoint_mistakes_exit_1_with_one_line(copied, capsys, case, expected):
    from harness.cli import main
    from harness.exit_codes import EXIT_BAD_INPUT
    if case == "moe":
        config_path = copied / "config.json"
        config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "model_type": "qwen3_moe"}))
    argv = {"wrong family": ["--checkpoint", str(copied), "--model", "nemotron"], "moe": ["--checkpoint", str(copied)],
            "missing": ["--checkpoint", str(copied / "nowhere")], "neither": []}[case]
    assert main(["diff", *argv, "--num-sequences", "2", "--new-tokens", "2"]) == EXIT_BAD_INPUT
    error = capsys.readouterr().err.strip()
    assert expected in error and len(error.splitlines()) == 1, error
