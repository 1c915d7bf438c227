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
    "logprob": "logprob",
    "sampler": "sampler",
}

CLAIM_KINDS = {
    "run_to_run_deterministic": "regions whose bits repeat run to run",
    "batch_invariant": "regions whose rows do not depend on the batch",
    "phase_consistent": "regions equal across prefill, chunked prefill, decode and trainer",
    "tp_sizes": "tensor-parallel degrees whose reduction tree is identical",
}
