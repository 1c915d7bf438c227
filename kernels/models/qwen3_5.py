"""Qwen3.5 (MoE): pre-norm layers h = h + mixer(norm(h)); h = h + moe(norm(h)); a final norm.

Mixers: Gated DeltaNet (one projection to q, k, v, the output gate z and the decay and beta inputs
a, b; the short conv with SiLU over q, k, v; the delta rule; the gated RMSNorm per value head; out
projection) or gated full attention (q with its per-head output gate, zero-centred q/k norms,
RoPE on the first rotary_dim dims, attended * sigmoid(gate)). MoE: softmax router, top-k
renormalised, SwiGLU experts, a shared expert scaled by sigmoid of its own gate. Norm weights are
zero-centred as released: the norm multiplies by 1 + w, made in fp32 (a per-element add, the same
bits on every side). ONE definition for both runtimes: every region goes through `dispatch`.
"""
import math

import torch
from torch import nn

from kernels.models.batch import call_per_case, settle_per_case
from kernels.models.lm_head import LanguageModel
from kernels.models.qwen3 import residual_norm
from kernels.models.qwen3_5_config import Qwen3_5Config
from kernels.models.recompute import run_layer
from kernels.models.state_space_init import state_space_value


def _param(*shape, dtype):
    return nn.Parameter(torch.empty(*shape, dtype=dtype))


class DeltaNetBlock(nn.Module):
    """Gated DeltaNet parameters (in_proj rows: q, k, v, z, b, a)."""

    def __init__(self, c):
        super().__init__()
        dt, heads = c.torch_dtype, c.linear_num_value_heads
        self.in_proj = _param(c.conv_dim + c.linear_value_dim + 2 * heads, c.hidden_size, dtype=dt)
        self.conv_weight = _param(c.conv_dim, c.linear_conv_kernel, dtype=dt)
        self.register_buffer("conv_bias", torch.zeros(c.conv_dim, dtype=dt))  # the release's conv has none
        self.dt_bias = _param(heads, dtype=torch.float32)
        self.A_log = _param(heads, dtype=torch.float32)
        self.gated_norm = _param(c.linear_value_head_dim, dtype=dt)
        self.out_proj = _param(c.hidden_size, c.linear_value_dim, dtype=dt)


class AttentionBlock(nn.Module):
    """Gated attention parameters (fused rows: per head q then its gate, then k, v)."""

    def __init__(self, c):
        super().__init__()
        dt = c.torch_dtype
        self.qkv_proj = _param((2 * c.num_heads + 2 * c.num_kv_heads) * c.head_dim, c.hidden_size, dtype=dt)
        self.q_norm = _param(c.head_dim, dtype=dt)
        self.k_norm = _param(c.head_dim, dtype=dt)
        self.o_proj = _param(c.hidden_size, c.num_heads * c.head_dim, dtype=dt)


class Qwen3_5Layer(nn.Module):
    """A mixer, the routed experts with the gated shared expert, and the two norms."""

    def __init__(self, c, mixer: str):
        super().__init__()
        dt = c.torch_dtype
        self.input_norm = _param(c.hidden_size, dtype=dt)
        self.mixer = DeltaNetBlock(c) if mixer == "linear_attention" else AttentionBlock(c)
        self.post_norm = _param(c.hidden_size, dtype=dt)
        self.router = _param(c.n_routed_experts, c.hidden_size, dtype=dt)
        self.register_buffer("router_bias", torch.zeros(c.n_routed_experts, dtype=torch.float32))  # no selection bias
        self.experts_gate_up = _param(c.n_routed_experts, 2 * c.moe_intermediate_size, c.hidden_size, dtype=dt)
        self.experts_down = _param(c.n_routed_experts, c.hidden_size, c.moe_intermediate_size, dtype=dt)
        self.shared_gate_up = _param(2 * c.shared_expert_intermediate_size, c.hidden_size, dtype=dt)
        self.shared_down = _param(c.hidden_size, c.shared_expert_intermediate_size, dtype=dt)
        self.shared_gate = _param(1, c.hidden_size, dtype=dt)


def _centred(weight):
    """A zero-centred norm weight as the norm multiplies by it: 1 + w in fp32."""
    return 1.0 + weight.float()


class Qwen3_5Model(LanguageModel):
    """Parameters plus the forward both runtimes call."""

    def __init__(self, config: Qwen3_5Config):
        super().__init__()
        self.config = config
        dt = config.torch_dtype
        self.embed_tokens = _param(config.vocab_size, config.hidden_size, dtype=dt)
        self.layers = nn.ModuleList(Qwen3_5Layer(config, mixer) for mixer in config.mixers)
        self.final_norm = _param(config.hidden_size, dtype=dt)
        self.recompute_layers = False  # kernels/models/recompute.py; the trainer switches it
        if not config.tie_word_embeddings:
            self.lm_head = _param(config.vocab_size, config.hidden_size, dtype=dt)

    def init_weights(self, seed: int) -> None:
        """Seeded random weights; A and dt bias as the release initialises them, norm weights
        near 0 (zero-centred) and the gated norm's near 1, so every multiply is exercised."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                leaf = name.rsplit(".", 1)[-1]
                value = state_space_value(leaf, torch.rand(p.shape, generator=g, dtype=torch.float64), (0.01, 16.0))
                if value is not None:
                    p.copy_(value)
                elif leaf == "gated_norm":
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
                elif p.dim() == 1:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(self.config.init_std * torch.randn(p.shape, generator=g))

    def forward(self, batch, dispatch, cache):
        """Final-normed hidden states [M, hidden] for every row of `batch`."""
        c, case = self.config, batch.case
        hidden = dispatch("embed", case, None, batch.tokens, self.embed_tokens)
        residual = None
        for index, (mixer, layer) in enumerate(zip(c.mixers, self.layers)):
            def block(hidden, residual, index=index, mixer=mixer, layer=layer):
                normed, residual = self._norm(dispatch, case, index, hidden, residual, layer.input_norm)
                mixed = (self._delta_net if mixer == "linear_attention" else self._attention)(
                    dispatch, batch, index, layer.mixer, normed, cache)
                normed, residual = self._norm(dispatch, case, index, mixed, residual, layer.post_norm)
                return self._moe(dispatch, case, index, layer, normed), residual
            hidden, residual = run_layer(self.recompute_layers, block, hidden, residual)
        normed, _ = self._norm(dispatch, case, c.num_layers, hidden, residual, self.final_norm)
        return normed

    def _norm(self, dispatch, case, index, hidden, residual, weight):
        return residual_norm(dispatch, case, index, hidden, residual, _centred(weight), self.config.rms_norm_eps)

    def _attention(self, dispatch, batch, index, block, normed, cache):
        c, case, rows = self.config, batch.case, normed.shape[0]
        qkv = dispatch("qkv_proj", case, index, normed, block.qkv_proj)
        q_gate, k, v = qkv.split([2 * c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim,
                                  c.num_kv_heads * c.head_dim], dim=-1)
        q, gate = q_gate.reshape(rows, c.num_heads, 2 * c.head_dim).chunk(2, dim=-1)
        k, v = (t.reshape(rows, c.num_kv_heads, c.head_dim) for t in (k, v))
        q, _ = dispatch("qk_norm", case, index, q.contiguous(), _centred(block.q_norm), eps=c.rms_norm_eps)
        k, _ = dispatch("qk_norm", case, index, k, _centred(block.k_norm), eps=c.rms_norm_eps)
        turned = c.rotary_dim
        q_rot, k_rot = dispatch("rope", case, index, q[..., :turned].contiguous(), k[..., :turned].contiguous(),
                                batch.positions, theta=c.rope_theta, max_position=c.max_position)
        q, k = torch.cat([q_rot, q[..., turned:]], dim=-1), torch.cat([k_rot, k[..., turned:]], dim=-1)
        attended = call_per_case(dispatch, "attention", batch, index, (q, k, v), cache.kv(index),
                                 scale=c.head_dim ** -0.5).reshape(rows, -1)
        gated = dispatch("attn_gate", case, index, attended, gate.reshape(rows, -1))
        return dispatch("o_proj", case, index, gated, block.o_proj)

    def _delta_net(self, dispatch, batch, index, block, normed, cache):
        c, case, rows = self.config, batch.case, normed.shape[0]
        heads, value_dim = c.linear_num_value_heads, c.linear_value_head_dim
        projected = dispatch("gdn_in_proj", case, index, normed, block.in_proj)
        qkv, z, b, a = projected.split([c.conv_dim, c.linear_value_dim, heads, heads], dim=-1)
        store = cache.delta(index, conv_rows=c.linear_conv_kernel - 1, conv_dim=c.conv_dim, num_heads=heads,
                            key_dim=c.linear_key_head_dim, value_dim=value_dim, dtype=c.torch_dtype,
                            device=normed.device, chunk_size=c.chunk_size)
        conv = call_per_case(dispatch, "gdn_conv", batch, index, (qkv,), store, block.conv_weight, block.conv_bias)
        q, k, v = conv.split([c.linear_key_dim, c.linear_key_dim, c.linear_value_dim], dim=-1)
        y = call_per_case(dispatch, "gated_delta", batch, index,
                          (q.reshape(rows, c.linear_num_key_heads, c.linear_key_head_dim),
                           k.reshape(rows, c.linear_num_key_heads, c.linear_key_head_dim),
                           v.reshape(rows, heads, value_dim), a, b), store, block.A_log, block.dt_bias,
                          chunk_size=c.chunk_size)
        settle_per_case(dispatch, "gated_delta", batch, store)
        normed_y = dispatch("gdn_norm", case, index, y, z.reshape(rows, heads, value_dim), block.gated_norm,
                            eps=c.rms_norm_eps)
        return dispatch("gdn_out_proj", case, index, normed_y.reshape(rows, -1), block.out_proj)

    def _moe(self, dispatch, case, index, layer, x):
        c = self.config
        scores = dispatch("router", case, index, x, layer.router, scoring="softmax")
        ids, weights = dispatch("topk", case, index, scores, layer.router_bias, top_k=c.num_experts_per_tok,
                                scaling=c.routed_scaling_factor)
        slots = dispatch("expert_gemm", case, index, x, ids, weights, layer.experts_gate_up, layer.experts_down,
                         swiglu_limit=math.inf)
        gate, up = dispatch("gate_up_proj", case, index, x, layer.shared_gate_up).chunk(2, dim=-1)
        shared = dispatch("down_proj", case, index, dispatch("mlp_act", case, index, gate, up), layer.shared_down)
        scale = dispatch("shared_gate_proj", case, index, x, layer.shared_gate)
        shared = dispatch("shared_gate", case, index, shared, scale)
        return dispatch("moe_combine", case, index, slots, ids, weights, shared)
