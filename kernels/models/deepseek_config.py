"""DeepSeek-V4 config: one attention kind per character of `layer_pattern` (S sliding window only,
C compressed sparse attention: window + the indexer's Top-K blocks, H heavily compressed: window +
every visible block), hyper-connected residual streams, Top-K (or, in the first `num_hash_layers`,
hash) routed MoE with a shared expert. Field names follow ours where families share a meaning."""
from dataclasses import dataclass

from kernels.models.dtypes import DTYPES

ATTENTION_KINDS = {"S": "sliding", "C": "csa", "H": "hca"}


@dataclass(frozen=True, slots=True)
class DeepseekConfig:
    """DeepSeek-V4 shape and numerics; kernels/models/configs/deepseek-*.yaml."""

    family: str
    """Always "deepseek"."""
    layer_pattern: str
    """Attention kinds, one character per layer (ATTENTION_KINDS)."""
    hidden_size: int
    vocab_size: int
    num_heads: int
    """Query heads; one shared K = V head."""
    head_dim: int
    rope_head_dim: int
    """Trailing channels of a head that RoPE rotates (interleaved pairs)."""
    q_lora_rank: int
    o_groups: int
    """Head groups of the grouped output projection."""
    o_lora_rank: int
    """Per-group width of the grouped output projection."""
    sliding_window: int
    """Keys a query sees by position (itself included)."""
    compress_rate_csa: int
    compress_rate_hca: int
    index_heads: int
    index_head_dim: int
    index_topk: int
    """Compressed blocks a CSA query keeps."""
    n_routed_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    num_hash_layers: int
    """The first layers route by a frozen token -> experts table."""
    scoring_func: str
    """sqrtsoftplus | sigmoid."""
    routed_scaling_factor: float
    swiglu_limit: float
    """Experts' (and the shared expert's) gate <= L, |up| <= L."""
    hc_mult: int
    """Residual streams."""
    hc_sinkhorn_iters: int
    hc_eps: float
    rms_norm_eps: float
    rope_theta: float
    """RoPE base of sliding layers."""
    compress_rope_theta: float
    """RoPE base of compressed layers, their blocks and the indexer."""
    max_position: int
    tie_word_embeddings: bool
    dtype: str
    init_std: float = 0.02
    expert_quant: str = "none"
    """Routed expert weights: none | fp8 (128x128 blocks)."""
    dense_quant: str = "none"
    """The attention projections, the compressors' and the shared expert: none | fp8 (W8A8, 128x128
    weight blocks, 1x128 activations); the indexer, router and head stay as they are."""
    kv_cache_dtype: str = "auto"
    """auto | fp8: the attention keys and the compressor's blocks kept as E4M3 (scale 1); the
    indexer's keys as they are."""

    SELECTION_ONLY = ("indexer.",)
    """Parameters the loss reaches only through the indexer's discrete Top-K: no gradient by the
    architecture (DeepSeek-V4 trains the indexer by a loss of its own)."""

    REGIONS = ("embed", "hc_mix", "hc_mix_out", "hc_head", "norm", "qk_norm", "q_a_proj", "q_b_proj", "kv_proj",
               "rope_interleaved", "compress_proj", "index_proj", "window_compress", "compress_norm",
               "compress_rope", "block_score", "block_topk", "sink_attention", "o_a_proj", "o_b_proj", "router",
               "topk", "hash_topk", "expert_gemm", "gate_up_proj", "mlp_act", "down_proj", "moe_combine",
               "weight_quant", "act_quant", "lm_head", "logprob", "sampler")

    def validate(self) -> None:
        if self.family != "deepseek":
            raise ValueError(f"family: expected 'deepseek', got {self.family!r}")
        unknown = set(self.layer_pattern) - set(ATTENTION_KINDS)
        if not self.layer_pattern or unknown:
            raise ValueError(f"layer_pattern: characters must be in {sorted(ATTENTION_KINDS)}, got {sorted(unknown)}")
        for name, allowed in (("scoring_func", ("sqrtsoftplus", "sigmoid")), ("expert_quant", ("none", "fp8")),
                              ("dense_quant", ("none", "fp8")), ("kv_cache_dtype", ("auto", "fp8")),
                              ("dtype", tuple(DTYPES))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: {getattr(self, name)!r} is not one of {allowed}")
        if self.rope_head_dim % 2 or not 0 < self.rope_head_dim <= min(self.head_dim, self.index_head_dim):
            raise ValueError("rope_head_dim: must be even and at most head_dim and index_head_dim")
        if (self.num_heads * self.head_dim) % self.o_groups:
            raise ValueError("o_groups: must divide num_heads * head_dim")
        if self.num_experts_per_tok > self.n_routed_experts:
            raise ValueError("num_experts_per_tok: more than n_routed_experts")
        if not 0 <= self.num_hash_layers <= self.num_layers:
            raise ValueError("num_hash_layers: must be between 0 and the number of layers")
        for name in ("rms_norm_eps", "hc_eps", "routed_scaling_factor", "swiglu_limit", "init_std", "sliding_window",
                     "compress_rate_csa", "compress_rate_hca", "index_topk", "hc_mult", "hc_sinkhorn_iters"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be positive")

    @property
    def torch_dtype(self):
        return DTYPES[self.dtype]

    @property
    def num_layers(self) -> int:
        return len(self.layer_pattern)

    @property
    def num_kv_heads(self) -> int:
        return 1

    @property
    def state_window(self) -> int:
        """The widest compressor window: the span a phase's carried state is cut at (the gates
        place chunked prefills and decodes either side of it, as of Mamba's chunk)."""
        return max(self.compress_rate_csa, self.compress_rate_hca)

    @property
    def intermediate_size(self) -> int:
        """The shared expert's width (the SiLU(gate) * up rows of mlp_act)."""
        return self.moe_intermediate_size

    @property
    def attention_kinds(self) -> tuple:
        return tuple(ATTENTION_KINDS[c] for c in self.layer_pattern)

    def compress_rate(self, kind: str) -> int:
        return {"csa": self.compress_rate_csa, "hca": self.compress_rate_hca}[kind]

    def compressed_entries(self, kind: str) -> int:
        """Compressed entries every query of a `kind` layer attends over, padded: one length in
        every phase (the chosen Top-K, or every block the longest sequence can close)."""
        return {"sliding": 0, "csa": self.index_topk, "hca": self.max_position // self.compress_rate_hca}[kind]
