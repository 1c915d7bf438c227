"""Parity of our Qwen3_5Model with transformers' Qwen3_5MoeForCausalLM, through the checkpoint
loader (kernels/models/hf_qwen3_5.py).

A tiny random model with both mixers (Gated DeltaNet with grouped value heads, gated attention with
partial RoPE) and the MoE with its gated shared expert, its norm weights, decay and dt bias drawn
away from their initial values. Weights must load bit for bit; float32 logits of a packed batch
must match transformers' per-sequence logits within LOGIT_TOLERANCE under both contracts; the
negative controls (the zero-centred norm read as a plain one, RoPE over the whole head) must fail
it; a multimodal release's names load the same bits; unsupported settings are named.
"""
import json
import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # set before transformers is imported

import pytest
import torch
from safetensors.torch import load_file, save_file

from gates.compare import assert_bitwise_equal
from kernels.models.hf_qwen3_5 import load_hf_qwen3_5, qwen3_5_config_from_hf, weight_sources
from tests.models.parity import fixed_sequences, packed_logits, under_config

transformers = pytest.importorskip("transformers")

LOGIT_TOLERANCE = 1e-5  # relative to max |logit|; the measured figure is printed
LAYER_TYPES = ["linear_attention", "full_attention", "linear_attention", "linear_attention"]
SEQUENCE_LENGTHS = (5, 70, 140)  # the delta rule's chunk is 64: inside one chunk, across 1 and 2 boundaries
VOCAB = 256
SEQUENCES = fixed_sequences(SEQUENCE_LENGTHS, VOCAB)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny random Qwen3_5MoeForCausalLM saved to a directory: (directory, hf_model)."""
    torch.manual_seed(0)
    hf_config = transformers.Qwen3_5MoeTextConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=len(LAYER_TYPES), layer_types=LAYER_TYPES,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_conv_kernel_dim=4,
        linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        max_position_embeddings=512, initializer_range=0.05, dtype="float32")
    hf_model = transformers.Qwen3_5MoeForCausalLM(hf_config).eval()
    with torch.no_grad():
        for name, tensor in hf_model.state_dict().items():
            if name.endswith("layernorm.weight") or name.endswith("_norm.weight") or name == "model.norm.weight":
                tensor.copy_(0.2 * torch.randn_like(tensor))  # zero-centred: 1 + w multiplies
            elif name.endswith("linear_attn.norm.weight"):
                tensor.copy_(1.0 + 0.1 * torch.randn_like(tensor))
            elif name.endswith("dt_bias") or name.endswith("A_log"):
                tensor.copy_(torch.randn_like(tensor))
            elif name.endswith("gate_up_proj") or name.endswith("experts.down_proj"):
                tensor.copy_(0.05 * torch.randn_like(tensor))  # transformers leaves 3-D experts uninitialised
    directory = tmp_path_factory.mktemp("qwen3_5")
    hf_model.save_pretrained(directory)
    return directory, hf_model


@pytest.fixture(scope="module")
def hf_logits(checkpoint):
    """transformers' [T, V] logits, one sequence at a time, no cache."""
    with torch.no_grad():
        return [checkpoint[1](input_ids=torch.tensor([ids]), use_cache=False).logits[0] for ids in SEQUENCES]


def _relative_diff(ours, theirs):
    scale = max(1.0, max(float(t.abs().max()) for t in theirs))
    return max(float((a - b).abs().max()) for a, b in zip(ours, theirs)) / scale


def test_weights_load_bit_exact(checkpoint):
    directory, hf_model = checkpoint
    config, model = load_hf_qwen3_5(directory, dtype="float32")
    assert config.layer_pattern == "LALL" and config.rotary_dim == 8
    hf_state, params = hf_model.state_dict(), dict(model.named_parameters())  # live: experts fused
    sources = weight_sources(config, fused_experts=True)
    assert set(sources) == set(params)
    for ours, (how, names) in sources.items():
        parts = [hf_state[name] for name in names]
        expected = parts[0].squeeze(1) if how == "squeeze" else torch.cat(parts)
        assert_bitwise_equal(params[ours], expected, ours)


def test_live_state_dict_layout_loads_the_same_bits(checkpoint, tmp_path):
    """The files' per-expert tensors and a live state dict's fused [E, 2I, H] load the same bits."""
    directory, hf_model = checkpoint
    assert "model.layers.0.mlp.experts.7.gate_proj.weight" in load_file(directory / "model.safetensors")
    shutil.copy(directory / "config.json", tmp_path / "config.json")
    save_file({k: v.contiguous() for k, v in hf_model.state_dict().items()}, tmp_path / "model.safetensors")
    _, from_files = load_hf_qwen3_5(directory)
    _, from_live = load_hf_qwen3_5(tmp_path)
    for (name, a), b in zip(from_files.state_dict().items(), from_live.state_dict().values()):
        assert_bitwise_equal(a, b, name)


@pytest.mark.parametrize("contract_name", ["fast", "consistent"])
def test_logits_match_transformers(checkpoint, hf_logits, contract_name):
    _, model = load_hf_qwen3_5(checkpoint[0], dtype="float32")
    diff = _relative_diff(packed_logits(model, contract_name, SEQUENCES), hf_logits)
    print(f"{contract_name}: max |Δlogit| / max |logit| = {diff:.3e} (tolerance {LOGIT_TOLERANCE:g})")
    assert diff <= LOGIT_TOLERANCE, (contract_name, diff)


def test_tolerance_catches_a_norm_read_as_a_plain_one(checkpoint, hf_logits):
    """Negative control: a block norm multiplying by w instead of 1 + w must fail the tolerance."""
    _, model = load_hf_qwen3_5(checkpoint[0], dtype="float32")
    with torch.no_grad():
        model.layers[1].input_norm.sub_(1.0)  # 1 + (w - 1) = w: the plain norm's multiply
    diff = _relative_diff(packed_logits(model, "consistent", SEQUENCES), hf_logits)
    assert diff > 100 * LOGIT_TOLERANCE, f"a plain norm went unnoticed: {diff:.3e}"


def test_tolerance_catches_rope_over_the_whole_head(checkpoint, hf_logits):
    """Negative control: RoPE turning every dim (partial_rotary_factor ignored) must fail the tolerance."""
    config, model = load_hf_qwen3_5(checkpoint[0], dtype="float32")
    whole = under_config(model, config, partial_rotary_factor=1.0)
    diff = _relative_diff(packed_logits(whole, "consistent", SEQUENCES), hf_logits)
    assert diff > 100 * LOGIT_TOLERANCE, f"RoPE over the whole head went unnoticed: {diff:.3e}"


def test_a_multimodal_release_loads_the_same_text_bits(checkpoint, tmp_path):
    """model_type qwen3_5_moe: the text settings under text_config, the tensors under
    model.language_model., a vision tower beside them (left out)."""
    directory, _ = checkpoint
    text = json.loads((directory / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_5_moe", "dtype": "float32",
                                                      "text_config": text, "vision_config": {}}))
    tensors = {name.replace("model.", "model.language_model.", 1) if name.startswith("model.") else name: t
               for name, t in load_file(directory / "model.safetensors").items()}
    tensors["model.visual.patch_embed.proj.weight"] = torch.ones(2, 2)
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    _, text_model = load_hf_qwen3_5(directory)
    _, release = load_hf_qwen3_5(tmp_path)
    for (name, a), b in zip(text_model.state_dict().items(), release.state_dict().values()):
        assert_bitwise_equal(a, b, name)


@pytest.mark.parametrize("field, value", [("attention_bias", True), ("hidden_act", "gelu"),
                                          ("layer_types", ["linear_attention", "sliding_attention"]),
                                          ("rope_parameters", {"rope_type": "yarn", "rope_theta": 1e4})])
def test_config_rejects_what_the_model_cannot_run(checkpoint, field, value):
    hf_config = json.loads((checkpoint[0] / "config.json").read_text())
    with pytest.raises(ValueError, match=f"^{field.split('_parameters')[0]}"):
        qwen3_5_config_from_hf({**hf_config, field: value})


def test_a_missing_tensor_is_named(checkpoint, tmp_path):
    copied = shutil.copytree(checkpoint[0], tmp_path / "checkpoint")
    tensors = load_file(copied / "model.safetensors")
    del tensors["model.layers.2.linear_attn.in_proj_a.weight"]
    save_file(tensors, copied / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="missing tensors.*layers.2.linear_attn.in_proj_a"):
        load_hf_qwen3_5(copied)
