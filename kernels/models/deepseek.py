"""DeepSeek-V4: the residual as hc_mult streams; each layer collapses them into its attention block
and its MoE block and mixes each block's output back (hyper-connections), the last collapse (HyperHead)
then a final norm and an untied lm_head. MoE: sqrt-softplus (or sigmoid) scores, Top-K by score plus
a selection-only bias, or in the first num_hash_layers a frozen token -> experts table; clamped SwiGLU
experts and one shared expert. ONE definition for both runtimes: every region goes through
`dispatch`; the attention half is kernels/models/deepseek_attention.py. Parameter names follow
transformers' DeepseekV4 (kernels/models/hf_deepseek.py loads it).
"""
import torch
from torch import nn

from kernels.models.deepseek_attention import attention, project
from kernels.models.deepseek_config import DeepseekConfig
from kernels.models.lm_head import LanguageModel
from kernels.models.recompute import run_layer


def _param(*shape, dtype):
    return nn.Parameter(torch.empty(*shape, dtype=dtype))


class HyperConnection(nn.Module):
    def __init__(self, c, outputs):
        super().__init__()
        self.fn = _param(outputs, c.hc_mult * c.hidden_size, dtype=torch.float32)
        self.base = _param(outputs, dtype=torch.float32)
        self.scale = _param(3 if outputs > c.hc_mult else 1, dtype=torch.float32)


class Compressor(nn.Module):
    """A window compressor's projections (CSA: 2 x width, the Ca and Cb halves), bias and norm."""

    def __init__(self, c, width, rate, overlap):
        super().__init__()
        slots = 2 * width if overlap else width
        self.kv_proj = _param(slots, c.hidden_size, dtype=c.torch_dtype)
        self.gate_proj = _param(slots, c.hidden_size, dtype=c.torch_dtype)
        self.position_bias = _param(rate, slots, dtype=torch.float32)
        self.kv_norm = _param(width, dtype=torch.float32)


class Indexer(Compressor):
    def __init__(self, c):
        super().__init__(c, c.index_head_dim, c.compress_rate_csa, overlap=True)
        self.q_b_proj = _param(c.index_heads * c.index_head_dim, c.q_lora_rank, dtype=c.torch_dtype)
        self.weights_proj = _param(c.index_heads, c.hidden_size, dtype=c.torch_dtype)


class Layer(nn.Module):
    def __init__(self, c, kind, hashed):
        super().__init__()
        dt, h = c.torch_dtype, c.hidden_size
        self.attn_hc, self.ffn_hc = HyperConnection(c, (2 + c.hc_mult) * c.hc_mult), HyperConnection(
            c, (2 + c.hc_mult) * c.hc_mult)
        self.input_norm, self.post_norm = _param(h, dtype=torch.float32), _param(h, dtype=torch.float32)
        self.q_a_proj = _param(c.q_lora_rank, h, dtype=dt)
        self.q_a_norm = _param(c.q_lora_rank, dtype=torch.float32)
        self.q_b_proj = _param(c.num_heads * c.head_dim, c.q_lora_rank, dtype=dt)
        self.register_buffer("q_b_norm", torch.ones(c.head_dim, dtype=torch.float32), persistent=False)
        self.kv_proj = _param(c.head_dim, h, dtype=dt)
        self.kv_norm = _param(c.head_dim, dtype=torch.float32)
        self.o_a_proj = _param(c.o_groups * c.o_lora_rank, c.num_heads * c.head_dim // c.o_groups, dtype=dt)
        self.o_b_proj = _param(h, c.o_groups * c.o_lora_rank, dtype=dt)
        self.sinks = _param(c.num_heads, dtype=torch.float32)
        if kind != "sliding":
            self.compressor = Compressor(c, c.head_dim, c.compress_rate(kind), overlap=kind == "csa")
        if kind == "csa":
            self.indexer = Indexer(c)
        self.router = _param(c.n_routed_experts, h, dtype=dt)
        if hashed:
            self.register_buffer("tid2eid", torch.zeros(c.vocab_size, c.num_experts_per_tok, dtype=torch.long))
        else:
            self.register_buffer("router_bias", torch.zeros(c.n_routed_experts, dtype=torch.float32))
        self.experts_gate_up = _param(c.n_routed_experts, 2 * c.moe_intermediate_size, h, dtype=dt)
        self.experts_down = _param(c.n_routed_experts, h, c.moe_intermediate_size, dtype=dt)
        self.shared_gate, self.shared_up = (_param(c.moe_intermediate_size, h, dtype=dt) for _ in range(2))
        self.shared_down = _param(h, c.moe_intermediate_size, dtype=dt)


class DeepseekModel(LanguageModel):
    """Parameters plus the forward both runtimes call."""

    def __init__(self, config: DeepseekConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = _param(config.vocab_size, config.hidden_size, dtype=config.torch_dtype)
        self.layers = nn.ModuleList(Layer(config, kind, i < config.num_hash_layers)
                                    for i, kind in enumerate(config.attention_kinds))
        self.hc_head = HyperConnection(config, config.hc_mult)
        self.final_norm = _param(config.hidden_size, dtype=torch.float32)
        self.recompute_layers = False  # kernels/models/recompute.py; the trainer switches it
        if not config.tie_word_embeddings:
            self.lm_head = _param(config.vocab_size, config.hidden_size, dtype=config.torch_dtype)

    def init_weights(self, seed: int) -> None:
        """Seeded random weights: norms and hyper-connection scales near 1, the hash table a random
        choice of distinct experts per token, the rest normal with std init_std."""
        g = torch.Generator().manual_seed(seed)
        c = self.config
        with torch.no_grad():
            for name, p in self.named_parameters():
                leaf = name.rsplit(".", 1)[-1]
                if p.dim() == 1 and leaf not in ("base", "sinks"):
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(c.init_std * torch.randn(p.shape, generator=g))
            for layer in self.layers:
                if hasattr(layer, "tid2eid"):
                    layer.tid2eid.copy_(torch.stack([torch.randperm(c.n_routed_experts, generator=g)[
                        :c.num_experts_per_tok] for _ in range(c.vocab_size)]))
                else:
                    layer.router_bias.copy_(0.01 * torch.randn(layer.router_bias.shape, generator=g))

    def forward(self, batch, dispatch, cache):
        """Final-normed hidden states [M, hidden] for every row of `batch`."""
        c, case = self.config, batch.case
        hidden = dispatch("embed", case, None, batch.tokens, self.embed_tokens)
        streams = hidden[:, None, :].expand(-1, c.hc_mult, -1).contiguous()
        hc = {"hc_eps": c.hc_eps, "norm_eps": c.rms_norm_eps}
        for index, layer in enumerate(self.layers):
            def block(streams, index=index, layer=layer):
                for half, norm, connection in (("attention", layer.input_norm, layer.attn_hc),
                                               ("moe", layer.post_norm, layer.ffn_hc)):
                    collapsed, post, comb = dispatch("hc_mix", case, index, streams, connection.fn, connection.base,
                                                     connection.scale, sinkhorn_iters=c.hc_sinkhorn_iters, **hc)
                    normed, _ = dispatch("norm", case, index, collapsed, norm, eps=c.rms_norm_eps)
                    out = (attention(self, dispatch, batch, index, layer, normed, cache) if half == "attention"
                           else self._moe(dispatch, batch, index, layer, normed))
                    streams = dispatch("hc_mix_out", case, index, streams, out, post, comb)
                return streams
            streams = run_layer(self.recompute_layers, block, streams)
        head = self.hc_head
        collapsed = dispatch("hc_head", case, c.num_layers, streams, head.fn, head.base, head.scale, **hc)
        normed, _ = dispatch("norm", case, c.num_layers, collapsed, self.final_norm, eps=c.rms_norm_eps)
        return normed

    def _moe(self, dispatch, batch, index, layer, x):
        c, case = self.config, batch.case
        scores = dispatch("router", case, index, x, layer.router, scoring=c.scoring_func)
        if hasattr(layer, "tid2eid"):
            ids = layer.tid2eid[batch.tokens]
            weights = dispatch("hash_topk", case, index, scores, ids, scaling=c.routed_scaling_factor)
        else:
            ids, weights = dispatch("topk", case, index, scores, layer.router_bias, top_k=c.num_experts_per_tok,
                                    scaling=c.routed_scaling_factor)
        gate_up, down = (dispatch("weight_quant", case, index, w, fmt=c.expert_quant)
                         for w in (layer.experts_gate_up, layer.experts_down))
        slots = dispatch("expert_gemm", case, index, x, ids, weights, gate_up, down, swiglu_limit=c.swiglu_limit)
        limit = c.swiglu_limit
        gate = project(dispatch, case, index, "gate_up_proj", x, layer.shared_gate, c.dense_quant).clamp(max=limit)
        up = project(dispatch, case, index, "gate_up_proj", x, layer.shared_up, c.dense_quant).clamp(min=-limit,
                                                                                                   max=limit)
        shared = project(dispatch, case, index, "down_proj", dispatch("mlp_act", case, index, gate, up),
                         layer.shared_down, c.dense_quant)
        return dispatch("moe_combine", case, index, slots, ids, weights, shared)
