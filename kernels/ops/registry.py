"""The implementations a contract may name, as "<family>.<variant>".

Keyword-only parameters of an implementation are its *pinned constants*, supplied by the
contract, except the family's call keywords (model semantics such as eps or scale, passed
by the model at call time).
"""
import inspect
from types import SimpleNamespace

from kernels.ops import (
    act_quant,
    activation,
    attention,
    block_topk,
    embedding,
    expert_gemm,
    gated_delta,
    gated_norm,
    hyper_connection,
    linear,
    logprob,
    moe_combine,
    norm,
    relu2_mlp,
    rope,
    rope_interleaved,
    router,
    sampler,
    sink_attention,
    ssm_conv,
    ssm_scan,
    topk,
    weight_quant,
    window_compress,
)

FAMILIES = {
    "embedding": embedding, "linear": linear, "norm": norm, "rope": rope, "attention": attention,
    "activation": activation, "logprob": logprob, "sampler": sampler, "ssm_conv": ssm_conv,
    "ssm_scan": ssm_scan, "gated_norm": gated_norm, "router": router, "topk": topk, "expert_gemm": expert_gemm,
    "moe_combine": moe_combine, "relu2_mlp": relu2_mlp, "weight_quant": weight_quant, "act_quant": act_quant,
    "hyper_connection": hyper_connection, "rope_interleaved": rope_interleaved, "window_compress": window_compress,
    "block_topk": block_topk, "sink_attention": sink_attention, "gated_delta": gated_delta,
    # a package's second table of variants, with its own signature, is a family of its own
    "hc_mix_out": SimpleNamespace(VARIANTS=hyper_connection.MIX_OUT, CALL_KEYWORDS=frozenset()),
    "hc_head": SimpleNamespace(VARIANTS=hyper_connection.HEAD, CALL_KEYWORDS={"hc_eps", "norm_eps"}),
    "block_score": SimpleNamespace(VARIANTS=block_topk.SCORERS, CALL_KEYWORDS={"scale"}),
    "hash_topk": SimpleNamespace(VARIANTS=topk.HASH, CALL_KEYWORDS={"scaling"}),
    "sigmoid_gate": SimpleNamespace(VARIANTS=activation.SIGMOID_GATE, CALL_KEYWORDS=frozenset()),
    "gated_norm_after": SimpleNamespace(VARIANTS=gated_norm.GATE_AFTER, CALL_KEYWORDS={"eps"}),
}
"""family -> its package, kernels/ops/<family>/, whose VARIANTS and CALL_KEYWORDS are its table (or,
for a package's second table, the table and its call keywords)."""

# family -> {variant: function}: each family's own VARIANTS dict (register_variant adds to it)
FAMILY_VARIANTS = {family: package.VARIANTS for family, package in FAMILIES.items()}
# family -> the keyword-only parameters the model passes at call time (not pinned constants)
CALL_KEYWORDS = {family: package.CALL_KEYWORDS for family, package in FAMILIES.items()}


def implementation(name: str):
    """The function behind "<family>.<variant>"; ValueError naming the choices if unknown."""
    family, _, variant = name.partition(".")
    if family not in FAMILY_VARIANTS or variant not in FAMILY_VARIANTS[family]:
        known = sorted(f"{f}.{v}" for f, vs in FAMILY_VARIANTS.items() for v in vs)
        raise ValueError(f"unknown implementation {name!r}; known: {', '.join(known)}")
    return FAMILY_VARIANTS[family][variant]


def keeps_unfinished_chunk(name: str) -> bool:
    """Whether a stateful implementation leaves its sequences' rows past the last chunk boundary
    kept in the state (its family's KEEPS_UNFINISHED_CHUNK) rather than folded: the runtime moves
    each sequence's books by it (kernels/models/mamba_state.py: settle)."""
    family, _, variant = name.partition(".")
    return variant in getattr(FAMILIES[family], "KEEPS_UNFINISHED_CHUNK", ())


def register_variant(family: str, variant: str, function) -> None:
    """Add an implementation at run time. Nothing in kernels does; the gates register their
    planted faults (gates/faults.py) this way, so a contract can name them."""
    if family not in FAMILY_VARIANTS:
        raise ValueError(f"unknown family {family!r}")
    FAMILY_VARIANTS[family][variant] = function


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
