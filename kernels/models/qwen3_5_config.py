"""Qwen3.5 (MoE) config: one mixer per character of `layer_pattern` (L Gated DeltaNet, A gated full
attention), every layer followed by a routed MoE with a gated shared expert, as transformers'
Qwen3_5MoeTextConfig describes the release (its layer_types as a string). Attention field names
follow ours (num_heads, num_kv_heads, head_dim) so the engine sizes its KV cache as for the others."""
from dataclasses import dataclass

from kernels.models.dtypes import DTYPES

MIXERS = {"L": "linear_attention", "A": "full_attention"}


@dataclass(frozen=True, slots=True)
class Qwen3_5Config:
    """Qwen3.5 shape and numerics; kernels/models/configs/qwen3_5-*.yaml."""

    family: str
    """Always "qwen3_5"."""
    layer_pattern: str
    """Mixer per layer: L (Gated DeltaNet) or A (gated full attention)."""
    hidden_size: int
    """Residual width."""
    vocab_size: int
    """V."""
    num_heads: int
    """Attention query heads (each with its output gate)."""
    num_kv_heads: int
    """Attention key/value heads."""
    head_dim: int
    """Attention head width."""
    partial_rotary_factor: float
    """RoPE turns the first head_dim * this dims of q and k; the rest pass."""
    rope_theta: float
    """RoPE base."""
    linear_num_key_heads: int
    """Gated DeltaNet q/k heads."""
    linear_num_value_heads: int
    """Gated DeltaNet v heads (each q/k head serves value_heads / key_heads of them)."""
    linear_key_head_dim: int
    """K."""
    linear_value_head_dim: int
    """V of the delta rule."""
    linear_conv_kernel: int
    """Short conv width over q, k, v."""
    chunk_size: int
    """The delta rule's chunk Q (absolute chunk boundaries under the consistent contract)."""
    n_routed_experts: int
    """Routed experts E (transformers' num_experts; named as the other families name it)."""
    num_experts_per_tok: int
    """Experts per token (top-k of the softmax, renormalised)."""
    moe_intermediate_size: int
    """Routed expert width."""
    shared_expert_intermediate_size: int
    """Shared expert width (its output scaled by sigmoid of its gate)."""
    rms_norm_eps: float
    """RMSNorm epsilon (the zero-centred block norms, q/k norms, the gated output norm)."""
    max_position: int
    """Longest position the RoPE table covers."""
    tie_word_embeddings: bool
    """lm_head shares the embedding table."""
    dtype: str
    """Parameter and activation dtype."""
    routed_scaling_factor: float = 1.0
    """The renormalised routing weights times this (the release: 1)."""
    init_std: float = 0.02
    """Std of seeded random init."""
    kv_cache_dtype: str = "auto"
    """auto (the activation dtype); fp8 is not offered for this family yet."""

    REGIONS = ("embed", "norm", "qk_norm", "qkv_proj", "rope", "attention", "attn_gate", "o_proj", "gdn_in_proj",
               "gdn_conv", "gated_delta", "gdn_norm", "gdn_out_proj", "router", "topk", "expert_gemm",
               "gate_up_proj", "mlp_act", "down_proj", "shared_gate_proj", "shared_gate", "moe_combine",
               "lm_head", "logprob", "sampler")

    def validate(self) -> None:
        if self.family != "qwen3_5":
            raise ValueError(f"family: expected 'qwen3_5', got {self.family!r}")
        unknown = set(self.layer_pattern) - set(MIXERS)
        if not self.layer_pattern or unknown:
            raise ValueError(f"layer_pattern: characters must be in {sorted(MIXERS)}, got {sorted(unknown)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype: {self.dtype!r} is not one of {sorted(DTYPES)}")
        if self.kv_cache_dtype != "auto":
            raise ValueError(f"kv_cache_dtype: {self.kv_cache_dtype!r}: only 'auto' for qwen3_5")
        for name in ("hidden_size", "vocab_size", "num_heads", "num_kv_heads", "head_dim", "linear_num_key_heads",
                     "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel",
                     "chunk_size", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                     "shared_expert_intermediate_size", "max_position"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be a positive integer")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads: must be a multiple of num_kv_heads")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError("linear_num_value_heads: must be a multiple of linear_num_key_heads")
        if self.num_experts_per_tok > self.n_routed_experts:
            raise ValueError("num_experts_per_tok: more than n_routed_experts")
        if not 0 < self.partial_rotary_factor <= 1 or self.rotary_dim % 2:
            raise ValueError("partial_rotary_factor: must give an even rotary width in (0, head_dim]")
        for name in ("rms_norm_eps", "rope_theta", "routed_scaling_factor", "init_std"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be positive")

    @property
    def torch_dtype(self):
        return DTYPES[self.dtype]

    @property
    def num_layers(self) -> int:
        return len(self.layer_pattern)

    @property
    def mixers(self) -> tuple:
        return tuple(MIXERS[c] for c in self.layer_pattern)

    @property
    def intermediate_size(self) -> int:
        """The width SiLU(gate) * up runs at outside the routed experts: the shared expert's."""
        return self.shared_expert_intermediate_size

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        """q, k and v side by side: the channels of the short conv."""
        return 2 * self.linear_key_dim + self.linear_value_dim
