"""Load a transformers `save_pretrained` directory of Qwen3.5-MoE into our Qwen3_5Model: the text
model (model_type qwen3_5_moe_text, Qwen3_5MoeForCausalLM) or the release's multimodal one
(qwen3_5_moe: its text_config and the tensors under model.language_model., the vision tower left
out by name). Weights are copied, never recomputed: the Gated DeltaNet's qkv, z, b, a projections
concatenated by rows into in_proj, q (with its per-head gate rows), k, v into qkv_proj, each expert's
gate and up rows (the files' per-expert tensors, or a live state dict's fused [E, 2I, H]) into
experts_gate_up, the shared expert's into shared_gate_up, conv1d's [C, 1, K] squeezed. Loading is
strict, as hf_checkpoint.py's; settings our model lacks are refused by name.
"""
from pathlib import Path

import torch

from kernels.models.config import config_from_mapping
from kernels.models.hf_checkpoint import (
    _rope,
    assemble,
    checkpoint_dtype,
    number,
    read_config_json,
    read_safetensors,
    require_exact_names,
    require_model_type,
)
from kernels.models.qwen3_5_config import MIXERS, Qwen3_5Config
from kernels.models.registry import build_model

_CHARS = {name: char for char, name in MIXERS.items()}
CHUNK_SIZE = 64  # the delta rule's chunk in flash-linear-attention and transformers' torch form
_MIXER_SOURCES = {
    "linear_attention": {"in_proj": ("in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight",
                                     "in_proj_a.weight"),
                         "conv_weight": ("conv1d.weight",), "dt_bias": ("dt_bias",), "A_log": ("A_log",),
                         "gated_norm": ("norm.weight",), "out_proj": ("out_proj.weight",)},
    "full_attention": {"qkv_proj": ("q_proj.weight", "k_proj.weight", "v_proj.weight"),
                       "q_norm": ("q_norm.weight",), "k_norm": ("k_norm.weight",), "o_proj": ("o_proj.weight",)},
}
_MIXER_MODULE = {"linear_attention": "linear_attn", "full_attention": "self_attn"}
_LAYER_SOURCES = {"input_norm": ("input_layernorm.weight",), "post_norm": ("post_attention_layernorm.weight",),
                  "router": ("mlp.gate.weight",),
                  "shared_gate_up": ("mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight"),
                  "shared_down": ("mlp.shared_expert.down_proj.weight",),
                  "shared_gate": ("mlp.shared_expert_gate.weight",)}


def text_config(hf: dict) -> dict:
    """The text model's settings: config.json itself, or the multimodal release's text_config."""
    require_model_type(hf, "qwen3_5_moe_text", "qwen3_5_moe")
    if hf["model_type"] == "qwen3_5_moe_text":
        return hf
    text = hf.get("text_config")
    if not isinstance(text, dict):
        raise ValueError("text_config: missing from a qwen3_5_moe config.json")
    return {"dtype": hf.get("dtype") or hf.get("torch_dtype"), **text, "model_type": "qwen3_5_moe_text"}


def qwen3_5_config_from_hf(hf: dict, dtype: str | None = None) -> Qwen3_5Config:
    """Our config from a Qwen3.5-MoE config.json mapping; dtype overrides the checkpoint's."""
    hf = text_config(hf)
    for name, wanted in (("attention_bias", False), ("hidden_act", "silu")):
        if hf.get(name, wanted) != wanted:
            raise ValueError(f"{name}: {hf[name]!r} is not supported (only {wanted!r})")
    rope = _rope(hf)
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type: only 'default' RoPE is supported, got {rope['rope_type']!r}")
    types = hf.get("layer_types")
    if not isinstance(types, list) or set(types) - set(_CHARS):
        raise ValueError(f"layer_types: a list of {sorted(_CHARS)} expected, got {types!r}")
    mapping = {
        "family": "qwen3_5", "layer_pattern": "".join(_CHARS[t] for t in types),
        "hidden_size": number(hf, "hidden_size", int), "vocab_size": number(hf, "vocab_size", int),
        "num_heads": number(hf, "num_attention_heads", int), "num_kv_heads": number(hf, "num_key_value_heads", int),
        "head_dim": number(hf, "head_dim", int),
        "partial_rotary_factor": float(rope.get("partial_rotary_factor", hf.get("partial_rotary_factor", 0.25))),
        "rope_theta": number(rope, "rope_theta", float),
        **{ours: number(hf, theirs, int) for ours, theirs in (
            ("linear_num_key_heads", "linear_num_key_heads"), ("linear_num_value_heads", "linear_num_value_heads"),
            ("linear_key_head_dim", "linear_key_head_dim"), ("linear_value_head_dim", "linear_value_head_dim"),
            ("linear_conv_kernel", "linear_conv_kernel_dim"), ("n_routed_experts", "num_experts"),
            ("num_experts_per_tok", "num_experts_per_tok"), ("moe_intermediate_size", "moe_intermediate_size"),
            ("shared_expert_intermediate_size", "shared_expert_intermediate_size"),
            ("max_position", "max_position_embeddings"))},
        "chunk_size": CHUNK_SIZE, "rms_norm_eps": number(hf, "rms_norm_eps", float),
        "tie_word_embeddings": bool(hf.get("tie_word_embeddings", False)),
        "dtype": str(checkpoint_dtype(hf, dtype)).removeprefix("torch."),
    }
    return config_from_mapping(Qwen3_5Config, mapping, "config.json")


def weight_sources(config: Qwen3_5Config, fused_experts: bool = False) -> dict:
    """Our parameter name -> (how, the checkpoint tensors by text model names) as assemble() takes
    them: the files' per-expert tensors, or with `fused_experts` a live state dict's [E, 2I, H]."""
    sources = {"embed_tokens": ("cat", ["model.embed_tokens.weight"]), "final_norm": ("cat", ["model.norm.weight"])}
    if not config.tie_word_embeddings:
        sources["lm_head"] = ("cat", ["lm_head.weight"])
    for index, mixer in enumerate(config.mixers):
        prefix = f"model.layers.{index}."
        for ours, theirs in _LAYER_SOURCES.items():
            sources[f"layers.{index}.{ours}"] = ("cat", [prefix + name for name in theirs])
        for ours, theirs in _MIXER_SOURCES[mixer].items():
            how = "squeeze" if ours == "conv_weight" else "cat"
            sources[f"layers.{index}.mixer.{ours}"] = (how, [f"{prefix}{_MIXER_MODULE[mixer]}.{n}" for n in theirs])
        experts = f"{prefix}mlp.experts."
        if fused_experts:
            sources[f"layers.{index}.experts_gate_up"] = ("cat", [experts + "gate_up_proj"])
            sources[f"layers.{index}.experts_down"] = ("cat", [experts + "down_proj"])
        else:
            sources[f"layers.{index}.experts_gate_up"] = ("stack_pairs", [
                f"{experts}{e}.{w}_proj.weight" for e in range(config.n_routed_experts) for w in ("gate", "up")])
            sources[f"layers.{index}.experts_down"] = ("stack", [
                f"{experts}{e}.down_proj.weight" for e in range(config.n_routed_experts)])
    return sources


def text_tensors(tensors: dict) -> dict:
    """The text model's tensors by the text model's names: the multimodal release keeps them under
    model.language_model. and its vision tower under model.visual. (not loaded: no vision here)."""
    if not any(name.startswith("model.language_model.") for name in tensors):
        return tensors
    return {name.replace("model.language_model.", "model.", 1): tensor for name, tensor in tensors.items()
            if not name.startswith("model.visual.")}


def load_hf_qwen3_5(directory, dtype: str | None = None):
    """(config, model) from a save_pretrained directory; weights cast to the model dtype (the decay
    and dt bias stay fp32, as the model keeps them)."""
    directory = Path(directory)
    try:
        config = qwen3_5_config_from_hf(read_config_json(directory), dtype)
    except ValueError as error:
        raise ValueError(f"{directory / 'config.json'}: {error}") from error
    tensors = text_tensors(read_safetensors(directory))
    model = build_model(config, seed=None)
    params = dict(model.named_parameters())
    sources = weight_sources(config, fused_experts="model.layers.0.mlp.experts.gate_up_proj" in tensors)
    require_exact_names(directory, tensors, {n for _, names in sources.values() for n in names}, "Qwen3.5-MoE")
    with torch.no_grad():
        for ours, (how, names) in sources.items():
            value = assemble(how, [tensors[name] for name in names], params[ours].shape)
            if value is None:
                shapes = {name: tuple(tensors[name].shape) for name in names[:2]}
                raise ValueError(f"{directory}: tensors {shapes}{' ...' if len(names) > 2 else ''} do not make "
                                 f"{ours} {tuple(params[ours].shape)} as config.json implies")
            params[ours].copy_(value)
    return config, model
