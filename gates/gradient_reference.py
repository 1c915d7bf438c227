"""C08's float64 reference dispatch: called by the model definition like RegionDispatch, every
region is its float64 formula from gates/reference, differentiated by torch autograd. The
tested side's discrete decisions are replayed, not recomputed (MoE expert ids, the indexer's blocks; FP8
activations, the K and V an FP8 KV store received and the entries DeepSeek-V4's attention read from
one, as straight-through points); the
quantized weights are gates/reference/quant.py's float64 quantization of the master weight,
straight through. It also counts the Mamba dt that lie near time_step_min, where the clamp's
gradient jumps (the gate redraws such inputs).
"""
import contextlib
import types

import torch

from gates.reference import activation as ref_activation
from gates.reference import attention as ref_attention
from gates.reference import block_topk as ref_block_topk
from gates.reference import gated_delta as ref_gated_delta
from gates.reference import hyper_connection as ref_hc
from gates.reference import linear as ref_linear
from gates.reference import logprob as ref_logprob
from gates.reference import moe as ref_moe
from gates.reference import norm as ref_norm
from gates.reference import quant as ref_quant
from gates.reference import rope as ref_rope
from gates.reference import sink_attention as ref_sink_attention
from gates.reference import ssm as ref_ssm
from gates.reference import window_compress as ref_window_compress

KINK_BAND = 1e-4  # dt = clamp(softplus(.), min=time_step_min) has a kink: draws this near it are redrawn
LINEAR_REGIONS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head", "ssm_in_proj", "ssm_out_proj",
                  "q_a_proj", "q_b_proj", "kv_proj", "o_a_proj", "o_b_proj", "compress_proj", "index_proj",
                  "gdn_in_proj", "gdn_out_proj", "shared_gate_proj")


class ReferenceDispatch:
    """Called by the model like RegionDispatch; every region is its float64 reference formula.
    `tested` holds the tested forward's discrete decisions, per (region, str(layer)) in call order:
    the MoE expert ids ("topk"), the FP8 activations ("act_quant"), the K and V an FP8 KV
    store received ("attention") and the entries read from one ("sink_attention")."""

    def __init__(self, tested: dict):
        self.tested = tested
        self.near_kinks = 0
        self.quantized = {"weights": 0, "activations": 0, "kv": 0}  # straight-through points taken
        self.weights = {}  # str(layer) -> the fp32 quantized weights in call order (C08 compares their bits)

    def selecting_rows(self, rows):
        return contextlib.nullcontext()  # row selections only matter to tracers

    for_segment = selecting_rows

    def keeps_unfinished_chunk(self, region, case):
        return None  # the reference scans whole sequences and keeps no state

    def fused(self, chain, case, layer, *args, **kwargs):
        return None  # no fused launch: the model calls each region's reference formula

    def __call__(self, region, case, layer, *args, **kwargs):
        if region in LINEAR_REGIONS:
            return ref_linear.linear(*args)
        return getattr(self, region)(layer, *args, **kwargs)

    def embed(self, layer, tokens, table):
        return table[tokens]

    def norm(self, layer, x, w, *, eps, residual=None):
        return ref_norm.rmsnorm(x, w, eps=eps, residual=residual)

    qk_norm = compress_norm = norm

    def rope(self, layer, q, k, positions, *, theta, max_position):
        return ref_rope.rope(q, positions, theta=theta), ref_rope.rope(k, positions, theta=theta)

    def _next(self, region, layer):
        return self.tested[(region, str(layer))].pop(0)

    def attention(self, layer, q, k, v, segments, kv, *, scale):
        if any(s.start != 0 for s in segments):
            raise ValueError("the reference attends over whole sequences (packed trainer layout)")
        if getattr(kv, "kv_format", "auto") == "fp8":  # E4M3 at a static scale of 1, straight through
            stored = (ref_quant.round_to_grid(ref_quant.fp32(t.double()), ref_quant.e4m3_grid(), ref_quant.E4M3_SIGN)[1]
                      for t in self._next("attention", layer))
            k, v = (exact + (quantized - exact).detach() for exact, quantized in zip((k, v), stored))
            self.quantized["kv"] += 1
        return torch.cat([ref_attention.causal_gqa(q[s.rows], k[s.rows], v[s.rows], 0, scale=scale)
                          for s in segments])

    def mlp_act(self, layer, gate, up):
        return ref_activation.silu_mul(gate, up)

    def logprob(self, layer, logits, targets, temperatures, *, full=False):
        return ref_logprob.logprob(logits, targets, temperatures, full=full)

    def ssm_conv(self, layer, xbc, segments, store, weight, bias):
        if any(s.start != 0 for s in segments):
            raise ValueError("the reference convolves whole sequences from position 0")
        return torch.cat([ref_ssm.conv_silu(xbc[s.rows], weight, bias) for s in segments])

    def ssm_scan(self, layer, x, B, C, dt_raw, segments, store, dt_bias, A_log, D, *, chunk_size, dt_min):
        dt = torch.nn.functional.softplus(dt_raw.double() + dt_bias.double())
        self.near_kinks += int(((dt - dt_min).abs() <= KINK_BAND * dt_min).sum())
        return torch.cat([ref_ssm.scan(x[s.rows], B[s.rows], C[s.rows], dt_raw[s.rows], dt_bias, A_log, D, dt_min)
                          for s in segments])

    def ssm_norm(self, layer, y, z, w, *, eps, group_size):
        return ref_ssm.gated_norm(y, z, w, eps, group_size)

    gdn_conv = ssm_conv

    def gated_delta(self, layer, q, k, v, a, b, segments, store, A_log, dt_bias, *, chunk_size):
        if any(s.start != 0 for s in segments):
            raise ValueError("the reference runs the delta rule over whole sequences from position 0")
        return torch.cat([ref_gated_delta.gated_delta(q[s.rows], k[s.rows], v[s.rows], a[s.rows], b[s.rows], A_log,
                                                      dt_bias) for s in segments])

    def gdn_norm(self, layer, y, z, w, *, eps):
        return ref_ssm.gate_after_norm(y, z, w, eps)

    def attn_gate(self, layer, x, gate):
        return x.double() * torch.sigmoid(gate.double())

    shared_gate = attn_gate

    def router(self, layer, x, w, *, scoring="sigmoid"):
        return ref_moe.router(x, w, scoring)

    def hash_topk(self, layer, scores, ids, *, scaling):
        return ref_moe.routing_weights(scores, ids, scaling)

    def hc_mix(self, layer, streams, fn, base, scale, **keywords):
        return ref_hc.mix_in(streams, fn, base, scale, **keywords)

    def hc_mix_out(self, layer, streams, block_out, post, comb):
        return ref_hc.mix_out(streams, block_out, post, comb)

    def hc_head(self, layer, streams, fn, base, scale, **keywords):
        return ref_hc.head(streams, fn, base, scale, **keywords)

    def rope_interleaved(self, layer, x, positions, *, theta, max_position, rope_dim, inverse=False):
        return ref_rope.rope_interleaved(x, positions, theta=theta, rope_dim=rope_dim, inverse=inverse)

    compress_rope = rope_interleaved

    def window_compress(self, layer, kv, gate, position_bias, state, *, rate, overlap):
        if state.emitted or state.pending_kv is not None:
            raise ValueError("the reference compresses whole sequences from position 0")
        blocks = ref_window_compress.blocks(kv, gate, position_bias, rate=rate, overlap=overlap)
        return blocks, types.SimpleNamespace(emitted=blocks.shape[0], pending_kv=None)  # refused above if reused

    def block_score(self, layer, q, keys, weights, *, scale):
        return ref_block_topk.scores(q, keys, weights, scale=scale)

    def block_topk(self, layer, scores, positions, *, top_k, compress_rate):
        return self._next("block_topk", layer)

    def sink_attention(self, layer, q, entries, valid, sinks, *, scale):
        if ("sink_attention", str(layer)) in self.tested:  # read from an FP8 KV store: straight through
            replayed = self._next("sink_attention", layer).to(entries.dtype)
            entries = entries + (replayed - entries).detach()
            self.quantized["kv"] += 1
        return ref_sink_attention.attend(q, entries, valid, sinks, scale=scale)

    def topk(self, layer, scores, bias, *, top_k, scaling):
        ids = self._next("topk", layer)
        return ids, ref_moe.routing_weights(scores, ids, scaling)

    def expert_gemm(self, layer, x, ids, weights, up, down, *, swiglu_limit=None):
        every = torch.stack([ref_moe.expert(x, up[e], down[e]) if swiglu_limit is None
                             else ref_moe.swiglu_expert(x, up[e], down[e], swiglu_limit)
                             for e in range(up.shape[0])])  # [E, M, H]
        return every[ids, torch.arange(x.shape[0])[:, None]]  # [M, k, H], unweighted

    def shared_expert(self, layer, x, up, down):
        return ref_moe.expert(x, up, down)

    mlp = shared_expert

    def moe_combine(self, layer, slots, ids, weights, shared):
        return (slots * weights.unsqueeze(-1)).sum(dim=1) + shared

    def weight_quant(self, layer, w, *, fmt):
        if fmt == "none":
            return w
        exact = (ref_quant.fp8_quantize(w, "block_128x128") if fmt == "fp8"
                 else ref_quant.nvfp4_quantize(w)).dequantized
        self.quantized["weights"] += 1
        rounded = ref_quant.to_output(exact, torch.float32)
        self.weights.setdefault(str(layer), []).append(rounded.detach().clone())
        return w + (rounded.double() - w).detach()

    def act_quant(self, layer, x, *, fmt):
        if fmt == "none":
            return x
        self.quantized["activations"] += 1
        return x + (self._next("act_quant", layer).double() - x).detach()
