"""Load a transformers save_pretrained directory (or the release) of Nemotron-H into NemotronModel.

Weights are copied, never recomputed: q/k/v rows concatenated, per-expert matrices stacked on a
new expert dim, conv1d's [C, 1, K] squeezed; router, its bias, Mamba's dt_bias/A_log/D in fp32.
Loading is strict (as hf_checkpoint.py); config numerics we lack are refused by name. dt is
clamped below at time_step_min, as transformers 5 does (NVIDIA's remote code: time_step_limit[0]).
"""
import math
from pathlib import Path

import torch

from kernels.models.config import config_from_mapping
from kernels.models.hf_checkpoint import (
    assemble,
    checkpoint_dtype,
    read_config_json,
    read_safetensors,
    require_exact_names,
    require_model_type,
)
from kernels.models.nemotron_config import NemotronConfig
from kernels.models.registry import build_model

# transformers' layer type names (and the legacy ones it remaps) -> our pattern characters.
_PATTERN_CHARS = {"linear_attention": "M", "mamba": "M", "full_attention": "*", "attention": "*",
                  "moe": "E", "mlp": "-"}
# Legacy config.json names that transformers' NemotronHConfig renames on load.
_ALIASES = {"mamba_n_groups": "n_groups", "mamba_d_conv": "conv_kernel", "mamba_dt_min": "time_step_min",
            "mamba_dt_limit": "time_step_limit", "mamba_conv_bias": "use_conv_bias",
            "mamba_chunk_size": "chunk_size"}
# Field -> (transformers' default, the only value our model implements).
_REQUIRED_VALUES = {
    "moe_latent_size": (None, None), "n_group": (1, 1), "topk_group": (1, 1),
    "norm_topk_prob": (True, True), "mlp_hidden_act": ("relu2", "relu2"),
    "mamba_hidden_act": ("silu", "silu"), "use_bias": (False, False),
    "mamba_proj_bias": (False, False), "attention_bias": (False, False), "mlp_bias": (False, False),
    "use_conv_bias": (True, True), "residual_in_fp32": (False, False),
    "num_nextn_predict_layers": (0, 0), "sliding_window": (None, None),
    "tie_word_embeddings": (False, False),  # NemotronHForCausalLM never ties lm_head
}
# Our per-layer parameter -> (how the parts combine, HF tensors under {prefix}.layers.{i}.).
_LAYER_SOURCES = {
    "mamba": {"norm": ("cat", "norm.weight"), "in_proj": ("cat", "mixer.in_proj.weight"),
              "conv_weight": ("squeeze", "mixer.conv1d.weight"), "conv_bias": ("cat", "mixer.conv1d.bias"),
              "dt_bias": ("cat", "mixer.dt_bias"), "A_log": ("cat", "mixer.A_log"), "D": ("cat", "mixer.D"),
              "gated_norm": ("cat", "mixer.norm.weight"), "out_proj": ("cat", "mixer.out_proj.weight")},
    "attention": {"norm": ("cat", "norm.weight"),
                  "qkv_proj": ("cat", "mixer.q_proj.weight", "mixer.k_proj.weight", "mixer.v_proj.weight"),
                  "o_proj": ("cat", "mixer.o_proj.weight")},
    "moe": {"norm": ("cat", "norm.weight"), "router": ("cat", "mixer.gate.weight"),
            "router_bias": ("cat", "mixer.gate.e_score_correction_bias"),
            "shared_up": ("cat", "mixer.shared_experts.up_proj.weight"),
            "shared_down": ("cat", "mixer.shared_experts.down_proj.weight")},
    "mlp": {"norm": ("cat", "norm.weight"), "up": ("cat", "mixer.up_proj.weight"),
            "down": ("cat", "mixer.down_proj.weight")},
}


def _pattern(hf_config: dict) -> str:
    """Our pattern string; transformers prefers layers_block_type when both are written."""
    types, pattern = hf_config.get("layers_block_type"), hf_config.get("hybrid_override_pattern")
    if types is not None:
        if not isinstance(types, list) or set(types) - set(_PATTERN_CHARS):
            raise ValueError(f"layers_block_type: layer types must be in {sorted(_PATTERN_CHARS)}, "
                             f"got {types!r}")
        from_types = "".join(_PATTERN_CHARS[t] for t in types)
        if pattern is not None and pattern != from_types:
            raise ValueError(f"hybrid_override_pattern: {pattern!r} disagrees with "
                             f"layers_block_type ({from_types!r})")
        return from_types
    if pattern is None:
        raise ValueError("layers_block_type: missing (and no hybrid_override_pattern)")
    return pattern


def _time_step_min(hf_config: dict) -> float:
    limit = hf_config.get("time_step_limit")
    if limit is not None:  # transformers 5 writes inf as {"__float__": "Infinity"}
        bounds = [float(b["__float__"]) if isinstance(b, dict) else float(b) for b in limit]
        if len(bounds) != 2 or not math.isinf(bounds[1]):
            raise ValueError(f"time_step_limit: only an open upper bound is supported, got {limit!r}")
    return float(hf_config.get("time_step_min", 0.001))


def nemotron_config_from_hf(hf_config: dict, dtype: str | None = None) -> NemotronConfig:
    """Our config from a Nemotron-H config.json mapping; dtype overrides the checkpoint's."""
    require_model_type(hf_config, "nemotron_h")
    hf_config = {_ALIASES.get(name, name): value for name, value in hf_config.items()}
    for name, (default, supported) in _REQUIRED_VALUES.items():
        if hf_config.get(name, default) != supported:
            raise ValueError(f"{name}: {hf_config[name]!r} is not supported by our NemotronModel "
                             f"(it implements only {supported!r})")
    dtype = checkpoint_dtype(hf_config, dtype)
    try:
        num_heads = hf_config["num_attention_heads"]
        mapping = {
            "family": "nemotron", "hybrid_override_pattern": _pattern(hf_config),
            "tie_word_embeddings": False, "dtype": str(dtype).removeprefix("torch."),
            "num_heads": num_heads, "num_kv_heads": hf_config.get("num_key_value_heads") or num_heads,
            "head_dim": hf_config.get("head_dim") or hf_config["hidden_size"] // num_heads,
            "time_step_min": _time_step_min(hf_config),
            "routed_scaling_factor": float(hf_config["routed_scaling_factor"]),
            "layer_norm_epsilon": float(hf_config["layer_norm_epsilon"]),
        }
        for name in ("hidden_size", "vocab_size", "mamba_num_heads", "mamba_head_dim", "ssm_state_size",
                     "n_groups", "conv_kernel", "chunk_size", "n_routed_experts", "num_experts_per_tok",
                     "moe_intermediate_size", "moe_shared_expert_intermediate_size", "intermediate_size"):
            mapping[name] = hf_config[name]
    except KeyError as error:
        raise ValueError(f"{error.args[0]}: missing from the Nemotron-H config.json") from error
    return config_from_mapping(NemotronConfig, mapping, "config.json")


def weight_sources(config: NemotronConfig, prefix: str = "backbone", fused_experts: bool = False) -> dict:
    """Our parameter/buffer name -> (how, HF tensor names): 'cat' concatenates rows, 'stack'
    stacks per-expert matrices, 'squeeze' drops conv1d's channel-group dim. `prefix` and
    `fused_experts` describe the files ('backbone', per expert) or a live state dict ('model', fused)."""
    sources = {"embed_tokens": ("cat", (f"{prefix}.embeddings.weight",)),
               "final_norm": ("cat", (f"{prefix}.norm_f.weight",)), "lm_head": ("cat", ("lm_head.weight",))}
    for index, kind in enumerate(config.block_types):
        layer = f"{prefix}.layers.{index}."
        for ours, (how, *theirs) in _LAYER_SOURCES[kind].items():
            sources[f"layers.{index}.{ours}"] = (how, tuple(layer + name for name in theirs))
        if kind == "moe":
            for ours, proj in (("experts_up", "up_proj"), ("experts_down", "down_proj")):
                names = ((f"{layer}mixer.experts.{proj}",) if fused_experts else tuple(
                    f"{layer}mixer.experts.{e}.{proj}.weight" for e in range(config.n_routed_experts)))
                sources[f"layers.{index}.{ours}"] = ("cat" if fused_experts else "stack", names)
    return sources


def checkpoint_layout(names) -> dict:
    """weight_sources' keyword arguments that describe a checkpoint with these tensor names."""
    names = set(names)
    prefix = "model" if any(n.startswith("model.") for n in names) else "backbone"
    return {"prefix": prefix, "fused_experts": any(n.endswith(".mixer.experts.up_proj") for n in names)}


def load_hf_nemotron(directory, dtype: str | None = None):
    """(config, model) from a save_pretrained directory. Weights are cast to each target's
    dtype (exact when widening, e.g. bf16 -> fp32; rounded when narrowing)."""
    directory = Path(directory)
    try:
        config = nemotron_config_from_hf(read_config_json(directory), dtype)
    except ValueError as error:
        raise ValueError(f"{directory / 'config.json'}: {error}") from error
    tensors = read_safetensors(directory)
    sources = weight_sources(config, **checkpoint_layout(tensors))
    require_exact_names(directory, tensors, {n for _, names in sources.values() for n in names}, "Nemotron-H")
    model = build_model(config, seed=None)
    targets = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    with torch.no_grad():
        for ours, (how, names) in sources.items():
            parts = [tensors[name] for name in names]
            value = assemble(how, parts, targets[ours].shape)
            if value is None:
                shapes = {name: tuple(part.shape) for name, part in zip(names, parts)}
                raise ValueError(f"{directory}: tensor shapes {shapes} do not fuse into "
                                 f"{ours} {tuple(targets[ours].shape)} as config.json implies")
            targets[ours].copy_(value)
    return config, model
