"""The implementations a contract may name, as "<family>.<variant>".

Keyword-only parameters of an implementation are its *pinned constants*, supplied by the
contract, except the family's call keywords (model semantics such as eps or scale, passed
by the model at call time).
"""
import inspect

from kernels.ops import (
    activation,
    attention,
    embedding,
    gated_norm,
    linear,
    logprob,
    moe,
    norm,
    quant_regions,
    rope,
    sampler,
    ssm_conv,
    ssm_scan,
)


def _same_names(*names):
    return {name: name for name in names}


# family -> (module, {variant: function name in the module})
FAMILY_VARIANTS = {
    "embedding": (embedding, _same_names("lookup")),
    "linear": (linear, _same_names("fast", "fast_split_k", "consistent")),
    "norm": (norm, _same_names("fast_fused", "fast_hf", "consistent")),
    "rope": (rope, _same_names("fast", "consistent")),
    "attention": (attention, _same_names("fast_sdpa", "fast_split_kv", "consistent")),
    "activation": (activation, _same_names("fast", "consistent")),
    "logprob": (logprob, _same_names("fast_log_softmax", "fast_logsumexp", "consistent")),
    "sampler": (sampler, _same_names("fast", "consistent")),
    "ssm_conv": (ssm_conv, _same_names("fast_conv1d", "fast_window_sum", "consistent")),
    "ssm_scan": (ssm_scan, _same_names("fast_chunked", "fast_recurrent", "consistent")),
    "gated_norm": (gated_norm, _same_names("fast", "consistent")),
    "router": (moe, {"fast": "router_fast", "consistent": "router_consistent"}),
    "topk": (moe, {"fast": "topk_fast", "consistent": "topk_consistent"}),
    "expert_gemm": (moe, {"fast": "experts_fast", "consistent": "experts_consistent"}),
    "moe_combine": (moe, {"fast": "combine_fast", "consistent": "combine_consistent"}),
    "relu2_mlp": (moe, {"fast": "shared_fast", "consistent": "shared_consistent"}),
    "weight_quant": (quant_regions, {"round_trip": "weight_round_trip"}),
    "act_quant": (quant_regions, {"fast": "activation_fast", "consistent": "activation_consistent"}),
}

CALL_KEYWORDS = {
    "linear": {"out_dtype"},  # fp32 partials for a layout's K leaves (kernels/layout/tensor_parallel.py)
    "norm": {"eps", "residual"},
    "rope": {"theta", "max_position"},
    "attention": {"scale"},
    "logprob": {"full"},
    "ssm_scan": {"chunk_size", "dt_min"},
    "gated_norm": {"eps", "group_size"},
    "topk": {"top_k", "scaling"},
    "weight_quant": {"fmt"},
    "act_quant": {"fmt"},
}


def implementation(name: str):
    """The function behind "<family>.<variant>"; ValueError naming the choices if unknown."""
    family, _, variant = name.partition(".")
    if family not in FAMILY_VARIANTS or variant not in FAMILY_VARIANTS[family][1]:
        known = sorted(f"{f}.{v}" for f, (_, vs) in FAMILY_VARIANTS.items() for v in vs)
        raise ValueError(f"unknown implementation {name!r}; known: {', '.join(known)}")
    module, variants = FAMILY_VARIANTS[family]
    target = variants[variant]
    return target if callable(target) else getattr(module, target)


def register_variant(family: str, variant: str, function) -> None:
    """Add an implementation at run time. Nothing in kernels does; the gates register their
    planted faults (gates/faults.py) this way, so a contract can name them."""
    if family not in FAMILY_VARIANTS:
        raise ValueError(f"unknown family {family!r}")
    FAMILY_VARIANTS[family][1][variant] = function


def constant_types(name: str) -> dict:
    """Pinned constants of an implementation: name -> (annotated type, has a default)."""
    family = name.partition(".")[0]
    constants = {}
    for param in inspect.signature(implementation(name)).parameters.values():
        if param.kind is not param.KEYWORD_ONLY or param.name in CALL_KEYWORDS.get(family, ()):
            continue
        if param.annotation not in (int, bool, str, float):
            raise TypeError(f"{name}: constant {param.name!r} needs an int/bool/str/float annotation")
        constants[param.name] = (param.annotation, param.default is not param.empty)
    return constants
