"""Load a transformers `save_pretrained` directory of a Qwen3 model into our Qwen3Model.

Weights are copied, never recomputed: q/k/v and gate/up are fused by concatenating rows
(dim 0) in that order, so each fused row holds the same bits as the HF row it came from.
Loading is strict: a missing, unexpected or misshapen tensor is an error naming it, since a
silently skipped weight would leave uninitialised memory in the model.
"""
import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from kernels.models.config import config_from_mapping
from kernels.models.qwen3 import Qwen3Config
from kernels.models.registry import build_model

# Our per-layer parameter -> the HF tensors (under model.layers.{i}.) fused into it, in order.
_LAYER_SOURCES = {
    "input_norm": ("input_layernorm",),
    "qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "q_norm": ("self_attn.q_norm",),
    "k_norm": ("self_attn.k_norm",),
    "o_proj": ("self_attn.o_proj",),
    "post_norm": ("post_attention_layernorm",),
    "gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
    "down_proj": ("mlp.down_proj",),
}


def checkpoint_dtype(hf_config: dict, override: str | None):
    """The override, else the dtype config.json names (transformers 5: dtype; 4.x: torch_dtype)."""
    dtype = override or hf_config.get("dtype") or hf_config.get("torch_dtype")
    if dtype is None:
        raise ValueError("dtype: config.json names no dtype/torch_dtype; pass dtype=")
    return dtype


SUPPORTED_MODEL_TYPES = ("qwen3", "nemotron_h", "deepseek_v4", "qwen3_5_moe", "qwen3_5_moe_text")
"""The transformers model_type values a loader exists for (this module, hf_nemotron.py, hf_deepseek.py,
hf_qwen3_5.py)."""
_UNSUPPORTED = {"qwen3_moe": "Qwen3-MoE", "qwen3_next": "Qwen3-Next", "qwen3_5_moe": "Qwen3.5-MoE",
                "qwen2": "Qwen2", "llama": "Llama", "deepseek_v3": "DeepSeek-V3", "deepseek_v4": "DeepSeek-V4"}


def require_model_type(hf_config: dict, *expected: str) -> None:
    """ValueError naming the architecture when config.json's model_type is none of `expected`."""
    found = hf_config.get("model_type")
    if found in expected:
        return
    named = f" ({_UNSUPPORTED[found]})" if found in _UNSUPPORTED else ""
    wanted = " or ".join(repr(e) for e in expected)
    raise ValueError(f"model_type: {found!r}{named} is not supported by this loader (expected {wanted}; "
                     f"loaders exist for {', '.join(SUPPORTED_MODEL_TYPES)})")


def number(hf_config: dict, name: str, kind: type):
    """hf_config[name] as `kind` (int or float); ValueError naming the field when it is
    missing, null, a bool or not a number (a bare TypeError names nothing)."""
    if name not in hf_config:
        raise ValueError(f"{name}: missing from config.json")
    value = hf_config[name]
    integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not integral):
        raise ValueError(f"{name}: expected {'an integer' if kind is int else 'a number'}, got {value!r}")
    return kind(value)


def _rope(hf_config: dict) -> dict:
    """The one RoPE setting of config.json. transformers 5 writes rope_parameters, 4.x a
    top-level rope_theta beside rope_scaling; both present and saying different things is a
    conflict this loader refuses rather than guess which one transformers would honour."""
    parameters, scaling = hf_config.get("rope_parameters"), hf_config.get("rope_scaling")
    for name, value in (("rope_parameters", parameters), ("rope_scaling", scaling)):
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"{name}: expected a mapping or null, got {value!r}")

    def kind(rope):
        return (rope or {}).get("rope_type", (rope or {}).get("type", "default"))
    if parameters and scaling and (kind(parameters) != kind(scaling) or any(
            parameters.get(key) != value for key, value in scaling.items() if key not in ("type", "rope_type"))):
        raise ValueError(f"rope_parameters {parameters} and rope_scaling {scaling} disagree: "
                         f"remove one from config.json")
    return parameters or scaling or {}


def qwen3_config_from_hf(hf_config: dict, dtype: str | None = None) -> Qwen3Config:
    """Our config from a Qwen3 config.json mapping; dtype overrides the checkpoint's."""
    require_model_type(hf_config, "qwen3")
    for name, unsupported in (("attention_bias", True), ("use_sliding_window", True)):
        if hf_config.get(name) == unsupported:
            raise ValueError(f"{name}: {unsupported} is not supported by our Qwen3Model")
    if hf_config.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act: only 'silu' is supported, got {hf_config['hidden_act']!r}")
    # transformers 5 writes rope_parameters: {rope_theta, rope_type}; 4.x a top-level
    # rope_theta next to rope_scaling (null, or a dict for YaRN and friends).
    rope = _rope(hf_config)
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise ValueError(f"rope_type: only 'default' RoPE is supported, got {rope_type!r}")
    if "rope_theta" in rope:
        rope_theta = number(rope, "rope_theta", float)
    elif "rope_theta" in hf_config:
        rope_theta = number(hf_config, "rope_theta", float)
    else:
        raise ValueError("rope_theta: not in config.json (top level or rope_parameters)")
    dtype = checkpoint_dtype(hf_config, dtype)
    num_heads, hidden = number(hf_config, "num_attention_heads", int), number(hf_config, "hidden_size", int)
    optional = {name: number(hf_config, name, int) for name in ("num_key_value_heads", "head_dim")
                if hf_config.get(name) is not None}
    mapping = {
        "family": "qwen3",
        "num_layers": number(hf_config, "num_hidden_layers", int),
        "hidden_size": hidden,
        "num_heads": num_heads,
        "num_kv_heads": optional.get("num_key_value_heads") or num_heads,
        "head_dim": optional.get("head_dim") or hidden // max(num_heads, 1),
        "intermediate_size": number(hf_config, "intermediate_size", int),
        "vocab_size": number(hf_config, "vocab_size", int),
        "rope_theta": rope_theta,
        "rms_norm_eps": number(hf_config, "rms_norm_eps", float),
        "tie_word_embeddings": bool(hf_config.get("tie_word_embeddings", False)),
        "max_position": number(hf_config, "max_position_embeddings", int),
        "dtype": str(dtype).removeprefix("torch."),
    }
    return config_from_mapping(Qwen3Config, mapping, "config.json")


def weight_sources(config: Qwen3Config) -> dict:
    """Our parameter name -> the HF tensor names concatenated (dim 0) into it."""
    sources = {"embed_tokens": ("model.embed_tokens.weight",),
               "final_norm": ("model.norm.weight",)}
    if not config.tie_word_embeddings:
        sources["lm_head"] = ("lm_head.weight",)
    for index in range(config.num_layers):
        for ours, theirs in _LAYER_SOURCES.items():
            sources[f"layers.{index}.{ours}"] = tuple(
                f"model.layers.{index}.{name}.weight" for name in theirs)
    return sources


def read_safetensors(directory) -> dict:
    """Every tensor of the checkpoint's safetensors files (all shards), by name."""
    directory = Path(directory)
    index = directory / "model.safetensors.index.json"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{index}: not a safetensors index with a weight_map: {error}") from error
        paths = sorted({directory / name for name in weight_map.values()})
    else:
        paths = sorted(directory.glob("*.safetensors"))
    if not paths:
        raise FileNotFoundError(f"{directory}: no *.safetensors files")
    tensors, origin = {}, {}
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"{path}: shard named by {index} does not exist")
        try:
            loaded = load_file(path)
        except SafetensorError as error:
            raise ValueError(f"{path}: corrupt or truncated safetensors file: {error}") from error
        twice = sorted(set(loaded) & set(tensors))
        if twice:  # without an index, which file wins would be the sort order's choice
            raise ValueError(f"{directory}: tensor {twice[0]!r} is in both {origin[twice[0]].name} and {path.name}"
                             f"{f' ({len(twice)} names in both)' if len(twice) > 1 else ''}; keep one file "
                             f"or add a model.safetensors.index.json")
        tensors.update(loaded)
        origin.update(dict.fromkeys(loaded, path))
    return tensors


def read_config_json(directory: Path) -> dict:
    """config.json of a save_pretrained directory; clear errors if it is not one."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory}: is a file; name the save_pretrained directory that holds it")
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: checkpoint directory does not exist")
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path}: missing; not a save_pretrained directory")
    try:
        document = json.loads(config_path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{config_path}: cannot read JSON: {error}") from error
    if not isinstance(document, dict):
        raise ValueError(f"{config_path}: expected a JSON object of settings, got a {type(document).__name__}")
    return document


def require_exact_names(directory, tensors: dict, wanted: set, family: str) -> None:
    """Strict loading: every wanted tensor present, nothing else (a skipped weight would
    leave uninitialised memory in the model)."""
    missing = sorted(wanted - set(tensors))
    if missing:
        raise ValueError(f"{directory}: missing tensors {missing}")
    unexpected = sorted(set(tensors) - wanted)
    if unexpected:
        raise ValueError(f"{directory}: unexpected tensors {unexpected} (not part of {family})")


def assemble(how: str, parts: list, target: torch.Size):
    """The checkpoint's tensors `parts` combined into one of our parameters as `how` says, or None
    when their shapes cannot make `target`: 'cat' concatenates rows (fused projections), 'stack'
    stacks per-expert matrices, 'stack_pairs' stacks per-expert [w1 rows; w3 rows] (each pair
    concatenated), 'squeeze' drops conv1d's channel-group dim."""
    if how == "squeeze":
        fits = len(parts) == 1 and parts[0].shape == (target[0], 1, *target[1:])
        return parts[0].squeeze(1) if fits else None
    if how in ("stack", "stack_pairs"):
        size = 2 if how == "stack_pairs" else 1
        experts = [assemble("cat", parts[i:i + size], target[1:]) for i in range(0, len(parts), size)]
        fits = len(experts) == target[0] and all(e is not None for e in experts)
        return torch.stack(experts) if fits else None
    fits = (all(p.dim() == len(target) and p.shape[1:] == target[1:] for p in parts)
            and sum(p.shape[0] for p in parts) == target[0])
    return torch.cat(parts) if fits else None


def load_hf_checkpoint(directory, dtype: str | None = None):
    """(config, model) from a save_pretrained directory. Weights are cast to the model dtype
    (exact when widening, e.g. bf16 -> fp32; rounded when narrowing)."""
    directory = Path(directory)
    try:
        config = qwen3_config_from_hf(read_config_json(directory), dtype)
    except ValueError as error:
        raise ValueError(f"{directory / 'config.json'}: {error}") from error
    tensors = read_safetensors(directory)
    sources = weight_sources(config)
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)  # some exports write the tied copy too
    require_exact_names(directory, tensors, {n for names in sources.values() for n in names}, "Qwen3")
    model = build_model(config, seed=None)
    parameters = dict(model.named_parameters())
    with torch.no_grad():
        for ours, names in sources.items():
            parts = [tensors[name] for name in names]
            value = assemble("cat", parts, parameters[ours].shape)
            if value is None:
                shapes = {name: tuple(part.shape) for name, part in zip(names, parts)}
                raise ValueError(f"{directory}: tensor shapes {shapes} do not fuse into "
                                 f"{ours} {tuple(parameters[ours].shape)} as config.json implies")
            parameters[ours].copy_(value)
    return config, model
