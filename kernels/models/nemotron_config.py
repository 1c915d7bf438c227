"""Nemotron-H hybrid config: one block type per character of `hybrid_override_pattern`
(M Mamba-2, * attention without positional encoding, E MoE, - relu^2 MLP), as in the real
config.json. Field names follow ours where both families share a meaning (num_heads,
num_kv_heads, head_dim) so the engine and trainer size caches the same way for both."""
from dataclasses import dataclass

from kernels.models.dtypes import DTYPES

BLOCK_TYPES = {"M": "mamba", "*": "attention", "E": "moe", "-": "mlp"}


@dataclass(frozen=True, slots=True)
class NemotronConfig:
    """Nemotron-H shape and numerics; kernels/models/configs/nemotron-*.yaml."""

    family: str
    """Always "nemotron"."""
    hybrid_override_pattern: str
    """Block types, one character per layer."""
    hidden_size: int
    """Residual width."""
    vocab_size: int
    """V."""
    num_heads: int
    """Attention query heads."""
    num_kv_heads: int
    """Attention key/value heads."""
    head_dim: int
    """Attention head width."""
    mamba_num_heads: int
    """Mamba-2 heads H."""
    mamba_head_dim: int
    """Mamba-2 head width P."""
    ssm_state_size: int
    """Mamba-2 state width N."""
    n_groups: int
    """Groups sharing B and C (and the gated norm's groups)."""
    conv_kernel: int
    """Causal conv width K."""
    chunk_size: int
    """SSD chunk length Q."""
    time_step_min: float
    """dt is clamped to at least this (transformers' time_step_limit)."""
    n_routed_experts: int
    """Routed experts E."""
    num_experts_per_tok: int
    """Experts per token (top-k)."""
    moe_intermediate_size: int
    """Routed expert width."""
    moe_shared_expert_intermediate_size: int
    """Shared expert width."""
    routed_scaling_factor: float
    """Routing weights are renormalised, then multiplied by this."""
    intermediate_size: int
    """Width of '-' (dense relu^2 MLP) layers."""
    layer_norm_epsilon: float
    """RMSNorm epsilon (block norms, final norm, gated norm)."""
    tie_word_embeddings: bool
    """lm_head shares the embedding table."""
    dtype: str
    """Parameter and activation dtype."""
    init_std: float = 0.02
    """Std of seeded random init."""
    expert_quant: str = "none"
    """Routed expert weights: none | nvfp4 (W4A16) | fp8 (128x128 blocks)."""
    mamba_proj_quant: str = "none"
    """Mamba in/out projections: none | fp8 (W8A8: weights 128x128, activations 1x128) | nvfp4 (W4A16)."""
    kv_cache_dtype: str = "auto"
    """auto (the activation dtype) | fp8 (E4M3, static scale 1, one read path everywhere)."""

    REGIONS = ("embed", "norm", "qkv_proj", "attention", "o_proj", "ssm_in_proj", "ssm_conv",
               "ssm_scan", "ssm_norm", "ssm_out_proj", "router", "topk", "expert_gemm",
               "shared_expert", "moe_combine", "mlp", "lm_head", "logprob", "sampler",
               "weight_quant", "act_quant")

    def validate(self) -> None:
        if self.family != "nemotron":
            raise ValueError(f"family: expected 'nemotron', got {self.family!r}")
        unknown = set(self.hybrid_override_pattern) - set(BLOCK_TYPES)
        if not self.hybrid_override_pattern or unknown:
            raise ValueError(f"hybrid_override_pattern: characters must be in {sorted(BLOCK_TYPES)}, "
                             f"got {sorted(unknown)}")
        for name, allowed in (("expert_quant", ("none", "nvfp4", "fp8")),
                              ("mamba_proj_quant", ("none", "fp8", "nvfp4")), ("kv_cache_dtype", ("auto", "fp8"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: {getattr(self, name)!r} is not one of {allowed}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype: {self.dtype!r} is not one of {sorted(DTYPES)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads: must be a multiple of num_kv_heads")
        if self.mamba_num_heads % self.n_groups:
            raise ValueError("mamba_num_heads: must be a multiple of n_groups")
        if self.num_experts_per_tok > self.n_routed_experts:
            raise ValueError("num_experts_per_tok: more than n_routed_experts")
        for name in ("layer_norm_epsilon", "routed_scaling_factor", "init_std"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be positive")

    @property
    def torch_dtype(self):
        return DTYPES[self.dtype]

    @property
    def num_layers(self) -> int:
        return len(self.hybrid_override_pattern)

    @property
    def block_types(self) -> tuple:
        return tuple(BLOCK_TYPES[c] for c in self.hybrid_override_pattern)

    @property
    def mamba_inner(self) -> int:
        return self.mamba_num_heads * self.mamba_head_dim

    @property
    def conv_dim(self) -> int:
        return self.mamba_inner + 2 * self.n_groups * self.ssm_state_size
