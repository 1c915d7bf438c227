"""Load a transformers `save_pretrained` directory of DeepSeek-V4 (model_type deepseek_v4, the
tensors under DeepSeek's own names, as transformers writes them back) into our DeepseekModel. Weights
are copied, never recomputed (each expert's w1 and w3 rows stacked into its gate_up); loading is
strict, as hf_checkpoint.py's. Refused by name: YaRN RoPE (our tables are plain RoPE), FP8 scales
(unquantized checkpoints only, for now), more than one KV head or shared expert, hash layers that
do not come first."""
from pathlib import Path

import torch

from kernels.models.config import config_from_mapping
from kernels.models.deepseek_config import DeepseekConfig
from kernels.models.hf_checkpoint import (
    assemble,
    checkpoint_dtype,
    number,
    read_config_json,
    read_safetensors,
    require_exact_names,
    require_model_type,
)
from kernels.models.registry import build_model

KIND_OF_LAYER_TYPE = {"sliding_attention": "S", "compressed_sparse_attention": "C",
                      "heavily_compressed_attention": "H"}
KIND_OF_RATIO = {0: "S", 4: "C", 128: "H"}  # legacy configs name each layer by its compress ratio
# our per-layer name -> the checkpoint's (DeepSeek's own names, which transformers writes back)
_LAYER = {"attn_hc.fn": "hc_attn_fn", "attn_hc.base": "hc_attn_base", "attn_hc.scale": "hc_attn_scale",
          "ffn_hc.fn": "hc_ffn_fn", "ffn_hc.base": "hc_ffn_base", "ffn_hc.scale": "hc_ffn_scale",
          "input_norm": "attn_norm.weight", "post_norm": "ffn_norm.weight", "q_a_proj": "attn.wq_a.weight",
          "q_a_norm": "attn.q_norm.weight", "q_b_proj": "attn.wq_b.weight", "kv_proj": "attn.wkv.weight",
          "kv_norm": "attn.norm.weight", "o_a_proj": "attn.wo_a.weight", "o_b_proj": "attn.wo_b.weight",
          "sinks": "attn.attn_sink", "compressor.kv_proj": "attn.compressor.wkv.weight",
          "compressor.gate_proj": "attn.compressor.wgate.weight", "compressor.position_bias": "attn.compressor.ape",
          "compressor.kv_norm": "attn.compressor.norm.weight", "indexer.kv_proj": "attn.indexer.compressor.wkv.weight",
          "indexer.gate_proj": "attn.indexer.compressor.wgate.weight",
          "indexer.position_bias": "attn.indexer.compressor.ape",
          "indexer.kv_norm": "attn.indexer.compressor.norm.weight", "indexer.q_b_proj": "attn.indexer.wq_b.weight",
          "indexer.weights_proj": "attn.indexer.weights_proj.weight", "router": "ffn.gate.weight",
          "router_bias": "ffn.gate.bias", "tid2eid": "ffn.gate.tid2eid", "shared_gate": "ffn.shared_experts.w1.weight",
          "shared_up": "ffn.shared_experts.w3.weight", "shared_down": "ffn.shared_experts.w2.weight"}
_TOP = {"embed_tokens": "embed.weight", "final_norm": "norm.weight", "lm_head": "head.weight",
        "hc_head.fn": "hc_head_fn", "hc_head.base": "hc_head_base", "hc_head.scale": "hc_head_scale"}
# transformers' save_pretrained writes these top-level names in its own spelling, under model.
_ALIASES = {"embed_tokens.weight": "embed.weight", "lm_head.weight": "head.weight", "hc_head.hc_fn": "hc_head_fn",
            "hc_head.hc_base": "hc_head_base", "hc_head.hc_scale": "hc_head_scale"}


def checkpoint_sources(ours: str, num_experts: int) -> tuple:
    """(how, checkpoint tensor names) one of our parameters or buffers is made of (assemble's
    `how`: each expert's gate and up rows are its w1 then its w3)."""
    if ours in _TOP:
        return "cat", [_TOP[ours]]
    _, index, rest = ours.split(".", 2)
    prefix = f"layers.{index}."
    if rest == "experts_gate_up":
        return "stack_pairs", [f"{prefix}ffn.experts.{e}.{w}.weight" for e in range(num_experts) for w in ("w1", "w3")]
    if rest == "experts_down":
        return "stack", [f"{prefix}ffn.experts.{e}.w2.weight" for e in range(num_experts)]
    return "cat", [prefix + _LAYER[rest]]


def normalized(directory, tensors: dict) -> dict:
    """The checkpoint's tensors by DeepSeek's own names: without transformers' `model.` prefix and
    its spelling of the top-level names."""
    out = {}
    for name, tensor in tensors.items():
        bare = name.removeprefix("model.")
        bare = _ALIASES.get(bare, bare)
        if bare in out:
            raise ValueError(f"{directory}: {bare!r} is in the checkpoint twice (with and without a prefix)")
        out[bare] = tensor
    return out


def _pattern(hf: dict) -> str:
    if hf.get("layer_types"):
        unknown = sorted(set(hf["layer_types"]) - set(KIND_OF_LAYER_TYPE))
        if unknown:
            raise ValueError(f"layer_types: unknown {unknown}")
        return "".join(KIND_OF_LAYER_TYPE[t] for t in hf["layer_types"])
    if hf.get("compress_ratios"):
        return "".join(KIND_OF_RATIO[r] for r in hf["compress_ratios"])
    raise ValueError("layer_types: missing (and no compress_ratios)")


def _rope_theta(hf: dict, which: str) -> float:
    rope = (hf.get("rope_parameters") or {}).get(which) or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_parameters.{which}: rope_type {rope['rope_type']!r} is not supported (plain RoPE only)")
    return float(rope.get("rope_theta", hf.get("rope_theta" if which == "main" else "compress_rope_theta")))


def deepseek_config_from_hf(hf: dict, dtype: str | None = None) -> DeepseekConfig:
    require_model_type(hf, "deepseek_v4")
    for name, wanted in (("num_key_value_heads", 1), ("n_shared_experts", 1)):
        if number(hf, name, int) != wanted:
            raise ValueError(f"{name}: {hf[name]} is not supported (DeepSeek-V4 has {wanted})")
    mlp, hashed = list(hf.get("mlp_layer_types") or []), 0
    while hashed < len(mlp) and mlp[hashed] == "hash_moe":
        hashed += 1
    if "hash_moe" in mlp[hashed:]:
        raise ValueError("mlp_layer_types: hash_moe layers must come first")
    rates = hf.get("compress_rates") or {}
    head_dim = number(hf, "head_dim", int)
    mapping = {
        "family": "deepseek", "layer_pattern": _pattern(hf), "hidden_size": number(hf, "hidden_size", int),
        "vocab_size": number(hf, "vocab_size", int), "num_heads": number(hf, "num_attention_heads", int),
        "head_dim": head_dim, "rope_head_dim": int(head_dim * float(hf.get("partial_rotary_factor") or 0.125)),
        "q_lora_rank": number(hf, "q_lora_rank", int), "o_groups": number(hf, "o_groups", int),
        "o_lora_rank": number(hf, "o_lora_rank", int), "sliding_window": number(hf, "sliding_window", int),
        "compress_rate_csa": int(rates.get("compressed_sparse_attention", 4)),
        "compress_rate_hca": int(rates.get("heavily_compressed_attention", 128)),
        "index_heads": number(hf, "index_n_heads", int), "index_head_dim": number(hf, "index_head_dim", int),
        "index_topk": number(hf, "index_topk", int), "n_routed_experts": number(hf, "n_routed_experts", int),
        "num_experts_per_tok": number(hf, "num_experts_per_tok", int),
        "moe_intermediate_size": number(hf, "moe_intermediate_size", int), "num_hash_layers": hashed,
        "scoring_func": hf.get("scoring_func"), "routed_scaling_factor": number(hf, "routed_scaling_factor", float),
        "swiglu_limit": number(hf, "swiglu_limit", float), "hc_mult": number(hf, "hc_mult", int),
        "hc_sinkhorn_iters": number(hf, "hc_sinkhorn_iters", int), "hc_eps": number(hf, "hc_eps", float),
        "rms_norm_eps": number(hf, "rms_norm_eps", float), "rope_theta": _rope_theta(hf, "main"),
        "compress_rope_theta": _rope_theta(hf, "compress"),
        "max_position": number(hf, "max_position_embeddings", int),
        "tie_word_embeddings": bool(hf.get("tie_word_embeddings", False)), "dtype": checkpoint_dtype(hf, dtype)}
    return config_from_mapping(DeepseekConfig, mapping, "config.json")


def load_hf_deepseek(directory, dtype: str | None = None):
    """(config, model) from a save_pretrained directory; weights cast to each target's dtype."""
    directory = Path(directory)
    try:
        config = deepseek_config_from_hf(read_config_json(directory), dtype)
    except ValueError as error:
        raise ValueError(f"{directory / 'config.json'}: {error}") from error
    tensors = normalized(directory, read_safetensors(directory))
    model = build_model(config, seed=None)
    targets = {name: t for name, t in {**dict(model.named_parameters()), **dict(model.named_buffers())}.items()
               if not name.endswith("q_b_norm")}  # a constant of ones: the unweighted norm
    sources = {ours: checkpoint_sources(ours, config.n_routed_experts) for ours in targets}
    require_exact_names(directory, tensors, {n for _, names in sources.values() for n in names}, "DeepSeek-V4")
    with torch.no_grad():
        for ours, (how, names) in sources.items():
            parts = [tensors[name] for name in names]
            value = assemble(how, parts, targets[ours].shape)
            if value is None:
                shapes = {name: tuple(part.shape) for name, part in zip(names[:2], parts)}
                raise ValueError(f"{directory}: tensors {shapes}{' ...' if len(names) > 2 else ''} do not make "
                                 f"{ours} {tuple(targets[ours].shape)} as config.json implies")
            targets[ours].copy_(value)
    return config, model
