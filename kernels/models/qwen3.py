"""Qwen3 dense: pre-norm decoder, GQA attention with q/k RMSNorm before RoPE, SiLU(gate)*up MLP.

ONE definition for both runtimes: every region goes through `dispatch(region, case, layer, ...)`,
so engine and trainer differ only in the contract's choice per case and the cache they pass;
qk_norm and rope may run fused with the same bits (kernels/ops/fusions.py). Weights are fused as
engines store them (qkv, gate_up; HF names mapped by hf_checkpoint.py); lm_head tied as configured.
"""
from dataclasses import dataclass

import torch
from torch import nn

from kernels.models.batch import call_per_case, whole_batch_segments
from kernels.models.dtypes import DTYPES
from kernels.models.lm_head import LanguageModel
from kernels.models.recompute import run_layer
from kernels.ops.fusions import QK_NORM_ROPE


@dataclass(frozen=True, slots=True)
class Qwen3Config:
    """Qwen3 shape and numerics; kernels/models/configs/qwen3-*.yaml."""

    family: str
    """Always "qwen3"."""
    num_layers: int
    """Decoder layers."""
    hidden_size: int
    """Residual width."""
    num_heads: int
    """Query heads."""
    num_kv_heads: int
    """Key/value heads (GQA)."""
    head_dim: int
    """Per-head width D."""
    intermediate_size: int
    """MLP width F."""
    vocab_size: int
    """V."""
    rope_theta: float
    """RoPE base."""
    rms_norm_eps: float
    """RMSNorm epsilon."""
    tie_word_embeddings: bool
    """lm_head shares the embedding table."""
    max_position: int
    """Longest position the RoPE table covers."""
    dtype: str
    """Parameter and activation dtype: float32 | bfloat16 | float16."""
    init_std: float = 0.02
    """Std of seeded random init."""
    kv_cache_dtype: str = "auto"
    """auto (the activation dtype) | fp8 (E4M3, static scale 1, one read path everywhere)."""

    REGIONS = ("embed", "norm", "qkv_proj", "qk_norm", "rope", "attention", "o_proj",
               "gate_up_proj", "mlp_act", "down_proj", "lm_head", "logprob", "sampler")

    def validate(self) -> None:
        if self.family != "qwen3":
            raise ValueError(f"family: expected 'qwen3', got {self.family!r}")
        if self.kv_cache_dtype not in ("auto", "fp8"):
            raise ValueError(f"kv_cache_dtype: {self.kv_cache_dtype!r} is not one of ('auto', 'fp8')")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype: {self.dtype!r} is not one of {sorted(DTYPES)}")
        for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                     "intermediate_size", "vocab_size", "max_position"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be a positive integer")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads: must be a multiple of num_kv_heads")
        if self.head_dim % 2:
            raise ValueError("head_dim: must be even (RoPE rotates halves)")
        for name in ("rope_theta", "rms_norm_eps", "init_std"):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"{name}: must be positive")

    @property
    def torch_dtype(self):
        return DTYPES[self.dtype]


def residual_norm(dispatch, case, index, hidden, residual, weight, eps):
    """(norm(hidden + residual), the new residual): the pre-norm with the residual add fused into
    the norm region, as the Qwen families run it; the first call has no residual yet."""
    if residual is None:
        normed, _ = dispatch("norm", case, index, hidden, weight, eps=eps)
        return normed, hidden
    return dispatch("norm", case, index, hidden, weight, eps=eps, residual=residual)


class Qwen3Layer(nn.Module):
    """One decoder layer's parameters (the arithmetic is in Qwen3Model)."""

    def __init__(self, config: Qwen3Config):
        super().__init__()
        q_width = config.num_heads * config.head_dim
        kv_width = config.num_kv_heads * config.head_dim
        dtype, hidden = config.torch_dtype, config.hidden_size
        self.input_norm = nn.Parameter(torch.ones(hidden, dtype=dtype))
        self.qkv_proj = nn.Parameter(torch.empty(q_width + 2 * kv_width, hidden, dtype=dtype))
        self.q_norm = nn.Parameter(torch.ones(config.head_dim, dtype=dtype))
        self.k_norm = nn.Parameter(torch.ones(config.head_dim, dtype=dtype))
        self.o_proj = nn.Parameter(torch.empty(hidden, q_width, dtype=dtype))
        self.post_norm = nn.Parameter(torch.ones(hidden, dtype=dtype))
        self.gate_up_proj = nn.Parameter(torch.empty(2 * config.intermediate_size, hidden, dtype=dtype))
        self.down_proj = nn.Parameter(torch.empty(hidden, config.intermediate_size, dtype=dtype))


class Qwen3Model(LanguageModel):
    """Parameters plus the forward both runtimes call."""

    def __init__(self, config: Qwen3Config):
        super().__init__()
        self.config = config
        dtype = config.torch_dtype
        self.embed_tokens = nn.Parameter(torch.empty(config.vocab_size, config.hidden_size, dtype=dtype))
        self.layers = nn.ModuleList(Qwen3Layer(config) for _ in range(config.num_layers))
        self.final_norm = nn.Parameter(torch.ones(config.hidden_size, dtype=dtype))
        self.recompute_layers = False  # kernels/models/recompute.py; the trainer switches it
        if not config.tie_word_embeddings:
            self.lm_head = nn.Parameter(torch.empty(config.vocab_size, config.hidden_size, dtype=dtype))

    def init_weights(self, seed: int) -> None:
        """Seeded random weights; norm weights near 1 so their multiply is exercised."""
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in self.named_parameters():
                noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
                if param.dim() == 1:
                    param.copy_(1.0 + 0.1 * noise)
                else:
                    param.copy_(self.config.init_std * noise)

    def forward(self, batch, dispatch, cache):
        """Final-normed hidden states [M, hidden] for every row of `batch`."""
        config, case = self.config, batch.case
        hidden = dispatch("embed", case, None, batch.tokens, self.embed_tokens)
        residual = None
        positions = batch.positions
        for index, layer in enumerate(self.layers):
            def block(hidden, residual, index=index, layer=layer):
                normed, residual = self._norm(dispatch, case, index, hidden, residual, layer.input_norm)
                hidden = self._attention(dispatch, batch, index, layer, normed, positions, cache)
                normed, residual = self._norm(dispatch, case, index, hidden, residual, layer.post_norm)
                return self._mlp(dispatch, case, index, layer, normed), residual
            hidden, residual = run_layer(self.recompute_layers, block, hidden, residual)
        normed, _ = self._norm(dispatch, case, config.num_layers, hidden, residual, self.final_norm)
        return normed


    def _norm(self, dispatch, case, index, hidden, residual, weight):
        return residual_norm(dispatch, case, index, hidden, residual, weight, self.config.rms_norm_eps)

    def _attention(self, dispatch, batch, index, layer, normed, positions, cache):
        config, case = self.config, batch.case
        num_rows, head_dim = normed.shape[0], config.head_dim
        qkv = dispatch("qkv_proj", case, index, normed, layer.qkv_proj)
        q_width, kv_width = config.num_heads * head_dim, config.num_kv_heads * head_dim
        q, k, v = qkv.split([q_width, kv_width, kv_width], dim=-1)
        q = q.reshape(num_rows, config.num_heads, head_dim)
        k = k.reshape(num_rows, config.num_kv_heads, head_dim)
        v = v.reshape(num_rows, config.num_kv_heads, head_dim)
        rope = {"theta": config.rope_theta, "max_position": config.max_position}
        kv, segments = cache.kv(index), whole_batch_segments(batch)
        target = None if segments is None else kv.write_target(segments, v)
        fused = dispatch.fused(QK_NORM_ROPE, case, index, q, k, layer.q_norm, layer.k_norm, positions,
                               eps=config.rms_norm_eps, kv_write=target, **rope)
        if fused is None:  # region by region
            q, _ = dispatch("qk_norm", case, index, q, layer.q_norm, eps=config.rms_norm_eps)
            k, _ = dispatch("qk_norm", case, index, k, layer.k_norm, eps=config.rms_norm_eps)
            fused = dispatch("rope", case, index, q, k, positions, **rope)
        elif target is not None:  # the launch wrote the step's K/V
            kv.mark_written(segments, fused[1], v)
        q, k = fused
        attended = call_per_case(dispatch, "attention", batch, index, (q, k, v), kv,
                                 scale=head_dim ** -0.5).reshape(num_rows, q_width)
        return dispatch("o_proj", case, index, attended, layer.o_proj)

    def _mlp(self, dispatch, case, index, layer, normed):
        gate, up = dispatch("gate_up_proj", case, index, normed, layer.gate_up_proj).chunk(2, dim=-1)
        activated = dispatch("mlp_act", case, index, gate, up)
        return dispatch("down_proj", case, index, activated, layer.down_proj)
