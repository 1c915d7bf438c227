"""The implementations a contract may name, as "<family>.<variant>".

Keyword-only parameters of an implementation are its *pinned constants*, supplied by the
contract, except the family's call keywords (model semantics such as eps or scale, passed
by the model at call time).
"""
import inspect

from kernels.ops import activation, attention, embedding, linear, logprob, norm, rope, sampler

FAMILY_VARIANTS = {
    "embedding": (embedding, ("lookup",)),
    "linear": (linear, ("fast", "fast_split_k", "consistent")),
    "norm": (norm, ("fast_fused", "fast_hf", "consistent")),
    "rope": (rope, ("fast", "consistent")),
    "attention": (attention, ("fast_sdpa", "fast_split_kv", "consistent")),
    "activation": (activation, ("fast", "consistent")),
    "logprob": (logprob, ("fast_log_softmax", "fast_logsumexp", "consistent")),
    "sampler": (sampler, ("fast", "consistent")),
}

CALL_KEYWORDS = {
    "norm": {"eps", "residual"},
    "rope": {"theta", "max_position"},
    "attention": {"scale"},
    "logprob": {"full"},
}


def implementation(name: str):
    """The function behind "<family>.<variant>"; ValueError naming the choices if unknown."""
    family, _, variant = name.partition(".")
    if family not in FAMILY_VARIANTS or variant not in FAMILY_VARIANTS[family][1]:
        known = sorted(f"{f}.{v}" for f, (_, vs) in FAMILY_VARIANTS.items() for v in vs)
        raise ValueError(f"unknown implementation {name!r}; known: {', '.join(known)}")
    return getattr(FAMILY_VARIANTS[family][0], variant)


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
