"""Nemotron-H hybrid: pre-norm blocks h = h + mixer(norm(h)), a final norm, an untied lm_head.

Mixers: Mamba-2, attention without positional encoding, MoE (sigmoid router, selection-only bias,
relu^2 experts, a shared expert) or a relu^2 MLP. ONE definition for both runtimes: every region
goes through `dispatch(region, case, layer, ...)`; attention, conv and scan run once per case over
its segments, against paged KV and pooled Mamba state in the engine, transient ones in the trainer.
"""
import torch
from torch import nn

from kernels.models.batch import call_per_case, settle_per_case
from kernels.models.lm_head import LanguageModel
from kernels.models.nemotron_config import NemotronConfig
from kernels.models.recompute import run_layer
from kernels.models.state_space_init import state_space_value


def _param(*shape, dtype):
    return nn.Parameter(torch.empty(*shape, dtype=dtype))


class MambaBlock(nn.Module):
    """Mamba-2 mixer parameters (in_proj rows: z, xBC, dt)."""

    def __init__(self, c):
        super().__init__()
        dt = c.torch_dtype
        self.norm = _param(c.hidden_size, dtype=dt)
        self.in_proj = _param(c.mamba_inner + c.conv_dim + c.mamba_num_heads, c.hidden_size, dtype=dt)
        self.conv_weight = _param(c.conv_dim, c.conv_kernel, dtype=dt)
        self.conv_bias = _param(c.conv_dim, dtype=dt)
        self.dt_bias = _param(c.mamba_num_heads, dtype=torch.float32)
        self.A_log = _param(c.mamba_num_heads, dtype=torch.float32)
        self.D = _param(c.mamba_num_heads, dtype=torch.float32)
        self.gated_norm = _param(c.mamba_inner, dtype=dt)
        self.out_proj = _param(c.hidden_size, c.mamba_inner, dtype=dt)


class AttentionBlock(nn.Module):
    """GQA attention parameters (fused qkv rows: q, k, v)."""

    def __init__(self, c):
        super().__init__()
        dt = c.torch_dtype
        self.norm = _param(c.hidden_size, dtype=dt)
        self.qkv_proj = _param((c.num_heads + 2 * c.num_kv_heads) * c.head_dim, c.hidden_size, dtype=dt)
        self.o_proj = _param(c.hidden_size, c.num_heads * c.head_dim, dtype=dt)


class MoEBlock(nn.Module):
    """Router (fp32, as the release keeps it), selection bias, routed and shared experts."""

    def __init__(self, c):
        super().__init__()
        dt = c.torch_dtype
        self.norm = _param(c.hidden_size, dtype=dt)
        self.router = _param(c.n_routed_experts, c.hidden_size, dtype=torch.float32)
        self.register_buffer("router_bias", torch.zeros(c.n_routed_experts, dtype=torch.float32))
        self.experts_up = _param(c.n_routed_experts, c.moe_intermediate_size, c.hidden_size, dtype=dt)
        self.experts_down = _param(c.n_routed_experts, c.hidden_size, c.moe_intermediate_size, dtype=dt)
        self.shared_up = _param(c.moe_shared_expert_intermediate_size, c.hidden_size, dtype=dt)
        self.shared_down = _param(c.hidden_size, c.moe_shared_expert_intermediate_size, dtype=dt)


class MLPBlock(nn.Module):
    """Dense relu^2 MLP parameters."""

    def __init__(self, c):
        super().__init__()
        dt = c.torch_dtype
        self.norm = _param(c.hidden_size, dtype=dt)
        self.up = _param(c.intermediate_size, c.hidden_size, dtype=dt)
        self.down = _param(c.hidden_size, c.intermediate_size, dtype=dt)


BLOCKS = {"mamba": MambaBlock, "attention": AttentionBlock, "moe": MoEBlock, "mlp": MLPBlock}


class NemotronModel(LanguageModel):
    """Parameters plus the forward both runtimes call."""

    def __init__(self, config: NemotronConfig):
        super().__init__()
        self.config = config
        dt = config.torch_dtype
        self.embed_tokens = _param(config.vocab_size, config.hidden_size, dtype=dt)
        self.layers = nn.ModuleList(BLOCKS[kind](config) for kind in config.block_types)
        self.final_norm = _param(config.hidden_size, dtype=dt)
        self.recompute_layers = False  # kernels/models/recompute.py; the trainer switches it
        if not config.tie_word_embeddings:
            self.lm_head = _param(config.vocab_size, config.hidden_size, dtype=dt)

    def init_weights(self, seed: int) -> None:
        """Seeded random weights; Mamba's A, dt bias and D as Mamba-2 initialises them."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                leaf = name.rsplit(".", 1)[-1]
                value = state_space_value(leaf, torch.rand(p.shape, generator=g, dtype=torch.float64), (1.0, 16.0))
                if value is not None:
                    p.copy_(value)
                elif p.dim() == 1:
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(self.config.init_std * torch.randn(p.shape, generator=g))
            for layer in self.layers:
                if isinstance(layer, MoEBlock):
                    layer.router_bias.copy_(0.01 * torch.randn(layer.router_bias.shape, generator=g))

    def forward(self, batch, dispatch, cache):
        """Final-normed hidden states [M, hidden] for every row of `batch`."""
        c, case = self.config, batch.case
        hidden = dispatch("embed", case, None, batch.tokens, self.embed_tokens)
        mixers = {"mamba": self._mamba, "attention": self._attention, "moe": self._moe, "mlp": self._mlp}
        for index, (kind, layer) in enumerate(zip(c.block_types, self.layers)):
            def block(hidden, index=index, kind=kind, layer=layer):
                normed, _ = dispatch("norm", case, index, hidden, layer.norm, eps=c.layer_norm_epsilon)
                return hidden + mixers[kind](dispatch, batch, index, layer, normed, cache)
            hidden = run_layer(self.recompute_layers, block, hidden)
        normed, _ = dispatch("norm", case, c.num_layers, hidden, self.final_norm, eps=c.layer_norm_epsilon)
        return normed


    def _attention(self, dispatch, batch, index, layer, normed, cache):
        c, case, rows = self.config, batch.case, normed.shape[0]
        qkv = dispatch("qkv_proj", case, index, normed, layer.qkv_proj)
        q, k, v = qkv.split([c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim,
                             c.num_kv_heads * c.head_dim], dim=-1)
        q = q.reshape(rows, c.num_heads, c.head_dim)
        k, v = (t.reshape(rows, c.num_kv_heads, c.head_dim) for t in (k, v))
        attended = call_per_case(dispatch, "attention", batch, index, (q, k, v), cache.kv(index),
                                 scale=c.head_dim ** -0.5)
        return dispatch("o_proj", case, index, attended.reshape(rows, -1), layer.o_proj)

    def _mamba(self, dispatch, batch, index, layer, normed, cache):
        c, case, rows = self.config, batch.case, normed.shape[0]
        projected = self._projection(dispatch, case, index, "ssm_in_proj", normed, layer.in_proj)
        z, xbc, dt_raw = projected.split([c.mamba_inner, c.conv_dim, c.mamba_num_heads], dim=-1)
        store = cache.mamba(index, conv_rows=c.conv_kernel - 1, conv_dim=c.conv_dim,
                            num_heads=c.mamba_num_heads, head_dim=c.mamba_head_dim,
                            state_size=c.ssm_state_size, num_groups=c.n_groups, chunk_size=c.chunk_size,
                            dtype=c.torch_dtype, device=normed.device)
        conv = call_per_case(dispatch, "ssm_conv", batch, index, (xbc,), store, layer.conv_weight,
                             layer.conv_bias)
        x, B, C = conv.split([c.mamba_inner, c.n_groups * c.ssm_state_size, c.n_groups * c.ssm_state_size],
                             dim=-1)
        y = call_per_case(dispatch, "ssm_scan", batch, index,
                          (x.reshape(rows, c.mamba_num_heads, c.mamba_head_dim),
                           B.reshape(rows, c.n_groups, c.ssm_state_size),
                           C.reshape(rows, c.n_groups, c.ssm_state_size), dt_raw), store,
                          layer.dt_bias, layer.A_log, layer.D, chunk_size=c.chunk_size, dt_min=c.time_step_min)
        settle_per_case(dispatch, "ssm_scan", batch, store)
        gated = dispatch("ssm_norm", case, index, y.reshape(rows, c.mamba_inner), z, layer.gated_norm,
                         eps=c.layer_norm_epsilon, group_size=c.mamba_inner // c.n_groups)
        return self._projection(dispatch, case, index, "ssm_out_proj", gated, layer.out_proj)

    def _projection(self, dispatch, case, index, region, x, weight):
        """A Mamba projection in the configured format (W8A8 quantizes its activations too)."""
        fmt = self.config.mamba_proj_quant
        weight = dispatch("weight_quant", case, index, weight, fmt=fmt)
        x = dispatch("act_quant", case, index, x, fmt="fp8" if fmt == "fp8" else "none")
        return dispatch(region, case, index, x, weight)

    def _moe(self, dispatch, batch, index, layer, normed, cache):
        c, case = self.config, batch.case
        scores = dispatch("router", case, index, normed, layer.router)
        ids, weights = dispatch("topk", case, index, scores, layer.router_bias,
                                top_k=c.num_experts_per_tok, scaling=c.routed_scaling_factor)
        up, down = (dispatch("weight_quant", case, index, w, fmt=c.expert_quant)
                    for w in (layer.experts_up, layer.experts_down))
        slots = dispatch("expert_gemm", case, index, normed, ids, weights, up, down)
        shared = dispatch("shared_expert", case, index, normed, layer.shared_up, layer.shared_down)
        return dispatch("moe_combine", case, index, slots, ids, weights, shared)

    def _mlp(self, dispatch, batch, index, layer, normed, cache):
        return dispatch("mlp", batch.case, index, normed, layer.up, layer.down)
