"""The contract's vocabulary: cases, and the op family each region must be implemented by."""

CASES = ("engine_prefill", "engine_decode", "engine_graph", "trainer_fwd", "trainer_bwd")

REGION_FAMILY = {
    "embed": "embedding",
    "norm": "norm",
    "qk_norm": "norm",
    "qkv_proj": "linear",
    "rope": "rope",
    "attention": "attention",
    "o_proj": "linear",
    "gate_up_proj": "linear",
    "mlp_act": "activation",
    "down_proj": "linear",
    "lm_head": "linear",
    "ssm_in_proj": "linear",
    "ssm_conv": "ssm_conv",
    "ssm_scan": "ssm_scan",
    "ssm_norm": "gated_norm",
    "ssm_out_proj": "linear",
    "router": "router",
    "topk": "topk",
    "expert_gemm": "expert_gemm",
    "shared_expert": "relu2_mlp",
    "moe_combine": "moe_combine",
    "mlp": "relu2_mlp",
    "weight_quant": "weight_quant",
    "act_quant": "act_quant",
    "logprob": "logprob",
    "sampler": "sampler",
    # DeepSeek-V4
    "hc_mix": "hyper_connection",
    "hc_mix_out": "hc_mix_out",
    "hc_head": "hc_head",
    "q_a_proj": "linear",
    "q_b_proj": "linear",
    "kv_proj": "linear",
    "o_a_proj": "linear",
    "o_b_proj": "linear",
    "compress_proj": "linear",
    "index_proj": "linear",
    "rope_interleaved": "rope_interleaved",
    "window_compress": "window_compress",
    "compress_norm": "norm",
    "compress_rope": "rope_interleaved",
    "block_score": "block_score",
    "block_topk": "block_topk",
    "sink_attention": "sink_attention",
    "hash_topk": "hash_topk",
    # Qwen3.5: Gated DeltaNet layers, the gated attention's output gate, the shared expert's gate
    "gdn_in_proj": "linear",
    "gdn_conv": "ssm_conv",
    "gated_delta": "gated_delta",
    "gdn_norm": "gated_norm_after",
    "gdn_out_proj": "linear",
    "attn_gate": "sigmoid_gate",
    "shared_gate_proj": "linear",
    "shared_gate": "sigmoid_gate",
}

# Regions whose variants split one computation between them and must be switched together:
# the fast expert GEMM applies the routing weight itself, the consistent combine applies it.
PAIRED_REGIONS = (("expert_gemm", "moe_combine"),)

CLAIM_KINDS = {
    "run_to_run_deterministic": "regions whose bits repeat run to run",
    "batch_invariant": "regions whose rows do not depend on the batch",
    "phase_consistent": "regions equal across prefill, chunked prefill, decode and trainer",
    "tp_sizes": "tensor-parallel degrees whose reduction tree is identical",
}
