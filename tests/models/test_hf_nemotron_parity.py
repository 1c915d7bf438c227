"""Parity of our NemotronModel with transformers' NemotronHForCausalLM, through the checkpoint
loader (kernels/models/hf_nemotron.py).

A tiny random model with every block type (Mamba-2, attention, MoE, relu^2 MLP) and a
non-zero router selection bias. Weights must load bit for bit; float32 logits of a packed
batch must match HF's per-sequence logits within LOGIT_TOLERANCE under both contracts;
unsupported configs and broken checkpoints must fail with the field or file named.
CPU, no network: `python -m pytest tests/models/test_hf_nemotron_parity.py -q`.
"""
import json
import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # set before transformers is imported

import pytest
import torch
from safetensors.torch import load_file, save_file

from gates.compare import assert_bitwise_equal
from kernels.models.hf_nemotron import load_hf_nemotron, nemotron_config_from_hf, weight_sources
from tests.models.parity import fixed_sequences, max_diff, packed_logits, under_config

transformers = pytest.importorskip("transformers")

# Measured on CPU fp32 (transformers 5.24, sdpa, torch Mamba fallback), max |logit| ~1.56:
# max |Δlogit| 7.2e-7 (fast) and 8.9e-7 (consistent), a few fp32 ulps. 1e-5 relative leaves
# ~17x headroom; the negative controls below move the logits by 1.3 (selection bias dropped)
# and 5e-3 (dt clamp removed).
LOGIT_TOLERANCE = 1e-5
PATTERN = "MEM*E-"
SEQUENCE_LENGTHS = (5, 19, 33)  # chunk 8: inside one chunk, across 2 and 4 boundaries; 33 > block_kv
VOCAB = 256
SEQUENCES = fixed_sequences(SEQUENCE_LENGTHS, VOCAB)
TIME_STEP_MIN = 0.1


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny random NemotronHForCausalLM saved to a directory: (directory, hf_model)."""
    torch.manual_seed(0)
    hf_config = transformers.NemotronHConfig(
        vocab_size=VOCAB, hidden_size=64, hybrid_override_pattern=PATTERN, mamba_num_heads=4,
        mamba_head_dim=16, ssm_state_size=16, n_groups=2, chunk_size=8, conv_kernel=4,
        time_step_min=TIME_STEP_MIN, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        n_routed_experts=8, num_experts_per_tok=2, routed_scaling_factor=2.5,
        moe_intermediate_size=32, moe_shared_expert_intermediate_size=64, intermediate_size=64,
        initializer_range=0.05, dtype="float32")
    hf_model = transformers.NemotronHForCausalLM(hf_config).eval()
    with torch.no_grad():
        for name, tensor in hf_model.state_dict().items():
            if name.endswith("norm.weight") or name.endswith("norm_f.weight"):
                tensor.copy_(1.0 + 0.1 * torch.randn_like(tensor))  # exercise the norm multiply
            elif name.endswith("e_score_correction_bias"):
                tensor.copy_(0.1 * torch.randn_like(tensor))  # larger than the score spread
            elif name.endswith("mixer.D"):
                tensor.copy_(0.1 * torch.randn_like(tensor))  # HF's D = 1 would drown the scan
            elif name.endswith("dt_bias"):  # softplus ~ 1e-4 .. 0.3: three heads on the clamp
                tensor.copy_(torch.tensor([-9.0, -6.0, -3.0, -1.0]))
    directory = tmp_path_factory.mktemp("nemotron")
    hf_model.save_pretrained(directory)
    return directory, hf_model


@pytest.fixture(scope="module")
def hf_logits(checkpoint):
    """transformers' [T, V] logits, one sequence at a time, no cache."""
    hf_model = checkpoint[1]
    with torch.no_grad():
        return [hf_model(input_ids=torch.tensor([ids]), use_cache=False).logits[0] for ids in SEQUENCES]


def test_checkpoint_files_use_the_release_names(checkpoint):
    names = set(load_file(checkpoint[0] / "model.safetensors"))
    assert {"backbone.embeddings.weight", "backbone.layers.1.mixer.experts.7.up_proj.weight"} <= names


def test_weights_load_bit_exact(checkpoint):
    directory, hf_model = checkpoint
    config, model = load_hf_nemotron(directory, dtype="float32")
    assert config.hybrid_override_pattern == PATTERN and config.time_step_min == TIME_STEP_MIN
    hf_state = hf_model.state_dict()  # the live layout: model.* names, experts fused [E, F, H]
    sources = weight_sources(config, prefix="model", fused_experts=True)
    targets = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    assert set(targets) == set(sources)
    for ours, (how, names) in sources.items():
        parts = [hf_state[name] for name in names]
        expected = parts[0].squeeze(1) if how == "squeeze" else torch.cat(parts)
        assert_bitwise_equal(targets[ours], expected, ours)
    assert all(targets[n].dtype == torch.float32 for n in ("layers.1.router", "layers.1.router_bias"))


def test_live_state_dict_layout_loads_the_same_bits(checkpoint, tmp_path):
    """model.* names with fused [E, F, H] experts (a raw state_dict dump) load too."""
    directory, hf_model = checkpoint
    shutil.copy(directory / "config.json", tmp_path / "config.json")
    save_file({k: v.contiguous() for k, v in hf_model.state_dict().items()}, tmp_path / "model.safetensors")
    _, from_files = load_hf_nemotron(directory, dtype="float32")
    _, from_live = load_hf_nemotron(tmp_path, dtype="float32")
    for (name, a), b in zip(from_files.state_dict().items(), from_live.state_dict().values()):
        assert_bitwise_equal(a, b, name)


@pytest.mark.parametrize("contract_name", ["fast", "consistent"])
def test_logits_match_transformers(checkpoint, hf_logits, contract_name):
    _, model = load_hf_nemotron(checkpoint[0], dtype="float32")
    theirs, ours = hf_logits, packed_logits(model, contract_name, SEQUENCES)
    scale = max(1.0, max(float(t.abs().max()) for t in theirs))
    diff = max_diff(ours, theirs)
    print(f"{contract_name}: max |Δlogit| {diff:.3e} (max |logit| {scale:.3f})")
    assert all(o.dtype == torch.float32 for o in ours)
    assert diff <= LOGIT_TOLERANCE * scale, (
        f"{contract_name}: max |Δlogit| {diff:.3e} > {LOGIT_TOLERANCE:g} * {scale:.3f}")


def test_tolerance_catches_a_dropped_selection_bias(checkpoint, hf_logits):
    """Negative control: routing without e_score_correction_bias must fail the tolerance."""
    _, model = load_hf_nemotron(checkpoint[0], dtype="float32")
    for index, kind in enumerate(PATTERN):
        if kind == "E":
            model.layers[index].router_bias.zero_()
    diff = max_diff(packed_logits(model, "consistent", SEQUENCES), hf_logits)
    assert diff > 100 * LOGIT_TOLERANCE, f"dropped selection bias went unnoticed: {diff:.3e}"


def test_tolerance_catches_a_missing_dt_clamp(checkpoint, hf_logits):
    """Negative control: time_step_min must reach the scan (most heads' dt sit below it)."""
    config, model = load_hf_nemotron(checkpoint[0], dtype="float32")
    unclamped = under_config(model, config, time_step_min=0.0)
    diff = max_diff(packed_logits(unclamped, "consistent", SEQUENCES), hf_logits)
    assert diff > 100 * LOGIT_TOLERANCE, f"missing dt clamp went unnoticed: {diff:.3e}"


def _saved_config(checkpoint):
    return json.loads((checkpoint[0] / "config.json").read_text())


def test_config_reads_the_legacy_pattern_and_names(checkpoint):
    hf_config = _saved_config(checkpoint)
    del hf_config["layers_block_type"]
    hf_config.update(hybrid_override_pattern=PATTERN, mamba_chunk_size=hf_config.pop("chunk_size"),
                     time_step_limit=[0.0, float("inf")])
    config = nemotron_config_from_hf(hf_config, dtype="bfloat16")
    assert (config.hybrid_override_pattern, config.chunk_size, config.dtype) == (PATTERN, 8, "bfloat16")


@pytest.mark.parametrize("field, value", [
    ("moe_latent_size", 32), ("n_group", 2), ("norm_topk_prob", False), ("mlp_hidden_act", "silu"),
    ("use_bias", True), ("mamba_proj_bias", True), ("attention_bias", True), ("use_conv_bias", False),
    ("residual_in_fp32", True), ("num_nextn_predict_layers", 1), ("tie_word_embeddings", True),
    ("time_step_limit", [0.0, 0.1]), ("layers_block_type", ["mamba", "sliding_attention"]),
])
def test_config_rejects_what_the_model_cannot_run(checkpoint, field, value):
    with pytest.raises(ValueError, match=f"^{field}: "):
        nemotron_config_from_hf({**_saved_config(checkpoint), field: value})


@pytest.fixture
def copied(checkpoint, tmp_path):
    """A private copy of the checkpoint to break."""
    return shutil.copytree(checkpoint[0], tmp_path / "checkpoint")


def test_wrong_model_type_is_rejected(copied):
    config_path = copied / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "model_type": "qwen3"}))
    with pytest.raises(ValueError, match="config.json: model_type.*'qwen3'"):
        load_hf_nemotron(copied)


def test_unsupported_field_names_the_file_and_field(copied):
    config_path = copied / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "n_group": 4}))
    with pytest.raises(ValueError, match="config.json: n_group: 4 is not supported"):
        load_hf_nemotron(copied)


def test_missing_tensor_is_named(copied):
    path = copied / "model.safetensors"
    tensors = load_file(path)
    del tensors["backbone.layers.4.mixer.experts.3.down_proj.weight"]
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"missing tensors \['backbone.layers.4.mixer.experts.3.down_proj"):
        load_hf_nemotron(copied)


def test_misshapen_conv_weight_is_named(copied):
    path = copied / "model.safetensors"
    tensors = load_file(path)
    name = "backbone.layers.2.mixer.conv1d.weight"
    tensors[name] = tensors[name][:, :, 1:].contiguous()
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match="conv1d.weight.*layers.2.conv_weight"):
        load_hf_nemotron(copied)


def test_truncated_safetensors_names_the_file(copied):
    path = copied / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match="model.safetensors: corrupt or truncated"):
        load_hf_nemotron(copied)
