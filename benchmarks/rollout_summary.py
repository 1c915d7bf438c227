"""What benchmarks/gpu_rollout.py makes of its samples, apart from measuring them: the decode
memory roofline (the weights, KV and SSM state a step reads, over the measured copy bandwidth),
each (model, batch) cell's medians and contract ratios, and the printed table and kernel lists.
Plain arithmetic and printing: no device, so it imports anywhere."""
import statistics


def step_weight_bytes(config, weights, batch: int) -> float:
    """Bytes of weights one decode step of `batch` rows must read: every weight once, but of
    an untied embedding table only the batch's rows, and of each routed-expert stack only the
    experts the rows can reach (at most batch x experts-per-token of them)."""
    total = 0.0
    for name, t in weights.items():
        size = t.numel() * t.element_size()
        if name == "embed_tokens" and not getattr(config, "tie_word_embeddings", False):
            size *= min(1.0, batch / t.shape[0])
        elif name.split(".")[-1].startswith("experts_"):  # [experts, ...] stacks of routed experts
            size *= min(1.0, batch * config.num_experts_per_tok / t.shape[0])
        total += size
    return total


def decode_roofline_s(config, weights, batch, context, bandwidth) -> float:
    """Seconds one decode step needs at least: the weights it must read (step_weight_bytes)
    once, the KV read, and each Mamba layer's fp32 SSM state read and written per sequence."""
    kinds = getattr(config, "block_types", ("attention",) * config.num_layers)
    kv_bytes = batch * context * kinds.count("attention") * 2 * config.num_kv_heads * config.head_dim * 2
    state_bytes = (batch * kinds.count("mamba") * 2 * 4 * config.mamba_num_heads * config.mamba_head_dim
                   * config.ssm_state_size if "mamba" in kinds else 0)
    return (step_weight_bytes(config, weights, batch) + kv_bytes + state_bytes) / bandwidth


def summarize_cell(cell, config, weights, prompt_len, new_tokens, bandwidth, times_trainer) -> dict:
    """Per contract (cell["samples"]' keys, in order) the medians of tokens/s, the decode step
    and the trainer step; the consistent/fast ratios; the decode roofline at the last context,
    and each contract's median of decode step over the roofline at that step's own context."""
    batch, summary = cell["batch"], {}
    for name, samples in cell["samples"].items():
        summary[name] = {
            "tokens_per_s": statistics.median(s["tokens_per_s"] for s in samples),
            "decode_step_ms": 1e3 * statistics.median(d for s in samples for d in s["decode_step_s"]),
            "train_step_s": statistics.median(s["train_step_s"] for s in samples) if times_trainer else None}
    summary["rollout_ratio"] = summary["consistent"]["tokens_per_s"] / summary["fast"]["tokens_per_s"]
    summary["train_ratio"] = (summary["consistent"]["train_step_s"] / summary["fast"]["train_step_s"]
                              if times_trainer else None)
    summary["decode_roofline_ms"] = 1e3 * decode_roofline_s(config, weights, batch, prompt_len + new_tokens, bandwidth)
    for name in cell["samples"]:  # decode step i reads prompt_len + 1 + i keys: its own roofline
        summary[name]["decode_over_roofline"] = statistics.median(
            d / decode_roofline_s(config, weights, batch, prompt_len + 1 + i, bandwidth)
            for s in cell["samples"][name] for i, d in enumerate(s["decode_step_s"]))
    return summary


TABLE_HEADER = (f"{'model':<18}{'batch':>6}{'fast tok/s':>12}{'cons tok/s':>12}{'ratio':>7}"
                f"{'fast dec ms':>12}{'cons dec ms':>12}{'train f/c s':>14}{'ratio':>7}")


def cell_line(model_name, cell, times_trainer) -> str:
    """The table's row of a summarized cell."""
    summary = cell["summary"]
    f, c = summary["fast"], summary["consistent"]
    return (f"{model_name:<18}{cell['batch']:>6}{f['tokens_per_s']:>12.1f}{c['tokens_per_s']:>12.1f}"
            f"{summary['rollout_ratio']:>7.2f}{f['decode_step_ms']:>12.2f}{c['decode_step_ms']:>12.2f}"
            + (f"{f['train_step_s']:>7.2f}/{c['train_step_s']:<6.2f}{summary['train_ratio']:>7.2f}"
               if times_trainer else f"{'-':>14}{'-':>7}")
            + f"  step/roofline at its context {f['decode_over_roofline']:.2f} / {c['decode_over_roofline']:.2f}"
            + f" (roofline at the last context {summary['decode_roofline_ms']:.2f} ms)"
            + ("  graphs" if cell["cuda_graphs"] else "  eager"))


def print_kernels(record) -> None:
    """Each profiled (model, contract): an eager decode step's top kernels, the profiled decode
    steps' (graphed where the model allows) kernels and host ops, and the prefill step's."""
    for entry in record["kernels"]:
        print(f"\n{entry['model']} {entry['contract']} eager decode step, batch {entry['batch']}: top kernels "
              f"(us, calls)")
        for row in entry["top"]:
            print(f"  {row['us']:>10.1f} {row['calls']:>6}  {row['kernel']}")
        step = entry["step"]
        print(f"  profiled step ({'graphs' if step['graphs'] else 'eager'}): wall {step['wall_ms']:.2f} ms, "
              f"GPU kernels {step['gpu_kernel_ms']:.2f} ms; kernels, then host ops, by self time (us, calls):")
        for row in step["kernels_us"] + step["host_self_us"]:
            print(f"  {row['us']:>10.1f} {row['calls']:>6}  {row.get('kernel', row.get('op'))}")
        prefill = step["prefill"]
        print(f"  profiled prefill step: wall {prefill['wall_ms']:.2f} ms, GPU kernels "
              f"{prefill['gpu_kernel_ms']:.2f} ms; kernels, then host ops, by self time (us, calls):")
        for row in prefill["kernels_us"] + prefill["host_self_us"]:
            print(f"  {row['us']:>10.1f} {row['calls']:>6}  {row.get('kernel', row.get('op'))}")
