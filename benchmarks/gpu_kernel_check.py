"""Device check of the consistent Triton kernels (kernels/ops/reduction_triton.py,
attention/triton.py) on CUDA, bit for bit (int views), plus decode timing against torch SDPA.

  python benchmarks/gpu_kernel_check.py --out DIR     (on the device; exits 1 on any bit mismatch)

row_sum (fp32 and bf16 input): each row of lengths 1..151936 computed alone equals the same
row inside batches of 1..1024 rows at several offsets, a [2, R/2, L] leading shape and a
non-contiguous copy. attention (bf16; Qwen3-1.7B heads 16/8/128, Nemotron-like 32/2/128;
contexts up to 4096): decode (over exactly its context and over a longer store) == prefill
== chunked prefill (several splits and chunk sizes) == batched decode == strided q/k/v views
== the trainer's autograd forward == the engine's paged launch (decodes and a prefill chunk of
other sequences in one step, K/V read through shuffled block tables); backward run to run. Launch
configs other than the pinned one are tried for information only (the table pins one; a difference
there fails nothing).
Error vs float64 is recorded. Timing: a decode step over B contexts of C tokens,
consistent_batched, consistent_paged and the fast contract's split_kv_paged vs SDPA
(enable_gqa, contiguous K/V), do_bench samples, medians printed, raw saved.
"""
import argparse
import json
import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import kernels.ops.attention.fast as attention_fast  # noqa: E402
import kernels.ops.attention.triton as attention_triton  # noqa: E402
from benchmarks.raw_output import provenance  # noqa: E402
from gates.reference.attention import causal_gqa  # noqa: E402
from kernels.engine.cache import PagedKVCache  # noqa: E402
from kernels.models.batch import Segment  # noqa: E402
from kernels.ops import reduction_triton  # noqa: E402

LENGTHS = (1, 2, 7, 100, 255, 256, 257, 1000, 1024, 1025, 2048, 4095, 4096, 4097, 8192, 32768, 65537, 151936)
ROW_COUNTS = (1, 2, 3, 5, 8, 16, 31, 64, 128, 257, 1024)
MODELS = {"qwen3-1.7b": (16, 8, 128), "nemotron": (32, 2, 128)}  # (Hq, Hkv, D)
CONTEXTS = (1, 17, 100, 515, 1024, 4096)
LAUNCH_VARIANTS = ((4, 1), (4, 3), (8, 2), (2, 2))  # (num_warps, num_stages), information only
TIMING = {"batch": (1, 8, 32, 128), "context": (1024, 4096)}
DEVICE, DTYPE = "cuda", torch.bfloat16  # a CPU smoke run under TRITON_INTERPRET=1 may override them


def difference(left, right) -> int:
    """How many elements differ in their bits (0: bitwise equal)."""
    views = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
    return int((left.contiguous().view(views[left.dtype]) != right.contiguous().view(views[right.dtype])).sum())


class Log:
    def __init__(self):
        self.records, self.failures = [], 0

    def check(self, required: bool, got, expected, **fields):
        differing = difference(got, expected)
        self.failures += int(required and differing > 0)
        self.records.append({**fields, "required": required, "numel": got.numel(), "differing": differing})


def check_row_sum(log, generator):
    for dtype in (torch.float32, DTYPE):
        for length in LENGTHS:
            x = torch.randn(max(ROW_COUNTS), length, device=DEVICE, generator=generator).to(dtype)
            batch = reduction_triton.row_sum(x)  # every row inside the largest batch
            exact = x.double().sum(-1, keepdim=True)
            error = float(((batch.double() - exact).abs() / x.double().abs().sum(-1, keepdim=True)).max())
            base = {"op": "row_sum", "dtype": str(dtype), "L": length, "rel_error_vs_fp64": error}
            for i in range(4):
                log.check(True, reduction_triton.row_sum(x[i:i + 1]), batch[i:i + 1], **base, case="alone", row=i)
            for rows in ROW_COUNTS:
                for offset in {0, (max(ROW_COUNTS) - rows) // 2, max(ROW_COUNTS) - rows}:
                    log.check(True, reduction_triton.row_sum(x[offset:offset + rows]), batch[offset:offset + rows],
                              **base, case="batch", rows=rows, offset=offset)
            shaped = reduction_triton.row_sum(x.reshape(2, -1, length)).reshape(-1, 1)
            log.check(True, shaped, batch, **base, case="leading shape [2, R/2, L]")
            if length <= 8192:
                log.check(True, reduction_triton.row_sum(x.T.contiguous().T), batch, **base, case="non-contiguous")


def decode_positions(context, rng):
    if context <= 128:
        return list(range(context))
    fixed = [0, 1, 15, 16, 17, 63, 64, 65, 127, 128, context // 2, context - 2, context - 1]
    return sorted(set(fixed + rng.sample(range(context), 32)))


def check_attention(log, model, context, block_kv, generator, rng):
    num_q_heads, num_kv_heads, head_dim = MODELS[model]
    scale = head_dim ** -0.5
    qkv = torch.randn(context, (num_q_heads + 2 * num_kv_heads) * head_dim, device=DEVICE,
                      generator=generator).to(DTYPE)  # a fused projection's output
    q_view, k_view, v_view = qkv.split([num_q_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim], 1)
    q = q_view.reshape(context, num_q_heads, head_dim).contiguous()
    k = k_view.reshape(context, num_kv_heads, head_dim).contiguous()
    v = v_view.reshape(context, num_kv_heads, head_dim).contiguous()

    def run(qq, kk, vv, start):
        return attention_triton.consistent(qq, kk, vv, start, scale=scale, block_kv=block_kv)

    full = run(q, k, v, 0)
    tail = max(0, context - 64)
    exact = causal_gqa(q[tail:].cpu(), k.cpu(), v.cpu(), tail, scale=scale).to(q.device)  # float64 on the CPU
    base = {"op": "attention", "model": model, "C": context, "block_kv": block_kv,
            "max_abs_error_vs_fp64": float((full[tail:].double() - exact).abs().max())}
    for p in decode_positions(context, rng):
        log.check(True, run(q[p:p + 1], k[:p + 1], v[:p + 1], p), full[p:p + 1], **base, case="decode", pos=p)
        log.check(True, run(q[p:p + 1], k, v, p), full[p:p + 1], **base, case="decode, longer store", pos=p)
    for split in sorted({s for s in (1, 7, 16, 17, 100, context // 3, context - 1) if 0 < s < context}):
        got = torch.cat([run(q[:split], k[:split], v[:split], 0), run(q[split:], k, v, split)])
        log.check(True, got, full, **base, case="chunked prefill, 2 chunks", split=split)
    for chunk in (64, 256, 333, 1000):
        if chunk < context:
            got = torch.cat([run(q[lo:lo + chunk], k[:lo + chunk], v[:lo + chunk], lo)
                             for lo in range(0, context, chunk)])
            log.check(True, got, full, **base, case="chunked prefill, fixed size", chunk=chunk)
    positions = torch.tensor([rng.randrange(context) for _ in range(16)], device=DEVICE)
    out = attention_triton.consistent_batched(q[positions][:, None], k.expand(16, -1, -1, -1), v.expand(16, -1, -1, -1),
                                              positions, scale=scale, block_kv=block_kv)
    log.check(True, out[:, 0], full[positions], **base, case="batched decode, 16 sequences")
    check_paged(log, base, q, k, v, full, scale, block_kv, rng)
    views = [t.view(context, -1, head_dim) for t in (q_view, k_view, v_view)]
    log.check(True, run(*views, 0), full, **base, case="strided q/k/v views")
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    trainer = attention_triton.consistent_autograd(*leaves, 0, scale=scale, block_kv=block_kv)
    log.check(True, trainer.detach(), full, **base, case="trainer autograd forward")
    grad_out = torch.randn(trainer.shape, device=DEVICE, generator=generator).to(DTYPE)
    grads = torch.autograd.grad(trainer, leaves, grad_out)
    again = torch.autograd.grad(attention_triton.consistent_autograd(*leaves, 0, scale=scale, block_kv=block_kv),
                                leaves, grad_out)
    for name, g, h in zip("qkv", grads, again):
        log.check(True, g, h, **base, case=f"backward d{name} run to run")
    check_launch_variants(log, base, run, q, k, v, full)


def paged_cache(num_kv_heads, head_dim, lengths, rng, keys, values):
    """A paged cache whose sequence i holds keys[:lengths[i]] in blocks handed out in a
    shuffled order (the pages of a sequence are not contiguous), with room up to the
    whole of `keys` for each."""
    block_size, room = 16, keys.shape[0] + 1
    num_blocks = len(lengths) * -(-room // block_size) + 4
    cache = PagedKVCache(num_layers=1, num_blocks=num_blocks, block_size=block_size, num_kv_heads=num_kv_heads,
                         head_dim=head_dim, dtype=DTYPE, device=DEVICE)
    rng.shuffle(cache._free)
    for seq_id, length in enumerate(lengths):
        cache.reserve(seq_id, room)
        cache.kv(0).write(Segment(seq_id, 0, length, 0, "engine_prefill"), keys[:length], values[:length])
    return cache


def check_paged(log, base, q, k, v, full, scale, block_kv, rng):
    """Decodes of 8 sequences at random positions and a prefill chunk of a ninth, one launch."""
    context = q.shape[0]
    positions = [rng.randrange(context) for _ in range(8)]
    split = context // 3
    cache = paged_cache(k.shape[1], k.shape[2], positions + [split], rng, k, v)
    segments, row = [], 0
    for seq_id, pos in enumerate(positions):
        segments.append(Segment(seq_id, pos, 1, row, "engine_decode"))
        row += 1
    segments.append(Segment(len(positions), split, context - split, row, "engine_prefill"))
    segments = tuple(segments)
    rows = torch.tensor(positions + list(range(split, context)), device=DEVICE)
    layer = cache.kv(0)
    layer.write_segments(segments, k[rows], v[rows])
    out = attention_triton.consistent_paged(q[rows], layer.paged(segments), scale=scale, block_kv=block_kv)
    log.check(True, out, full[rows], **base, case="paged step: 8 decodes + a chunk")


def check_launch_variants(log, base, run, q, k, v, full):
    key = (q.shape[-1], q.dtype)
    pinned = attention_triton.LAUNCH_TABLE.get(key, attention_triton.DEFAULT_LAUNCH)
    try:
        for variant in LAUNCH_VARIANTS:
            attention_triton.LAUNCH_TABLE[key] = variant
            log.check(False, run(q, k, v, 0), full, **base, case="launch variant (info)", launch=variant)
    finally:
        attention_triton.LAUNCH_TABLE[key] = pinned


def time_decode(model, batch, context, block_kv, generator):
    num_q_heads, num_kv_heads, head_dim = MODELS[model]
    scale = head_dim ** -0.5
    q = torch.randn(batch, 1, num_q_heads, head_dim, device=DEVICE, generator=generator).to(DTYPE)
    keys, values = (torch.randn(batch, context, num_kv_heads, head_dim, device=DEVICE, generator=generator)
                    .to(DTYPE) for _ in range(2))
    starts = torch.full((batch,), context - 1, device=DEVICE, dtype=torch.int64)
    q_s, k_s, v_s = (t.transpose(1, 2).contiguous() for t in (q, keys, values))  # SDPA's [B, H, L, D]

    def ours():
        return attention_triton.consistent_batched(q, keys, values, starts, scale=scale, block_kv=block_kv)

    def sdpa():
        return F.scaled_dot_product_attention(q_s, k_s, v_s, scale=scale, enable_gqa=True)
    cache = paged_cache(num_kv_heads, head_dim, [context - 1] * batch, random.Random(batch), keys[0], values[0])
    segments = tuple(Segment(b, context - 1, 1, b, "engine_decode") for b in range(batch))
    layer = cache.kv(0)
    layer.write_segments(segments, keys[0, context - 1:].expand(batch, -1, -1),
                         values[0, context - 1:].expand(batch, -1, -1))
    paged = layer.paged(segments)

    def ours_paged():
        return attention_triton.consistent_paged(q[:, 0], paged, scale=scale, block_kv=block_kv)

    splits = attention_fast._splits_to_fill(q.device, batch * num_kv_heads, 8)  # as the fast contract picks

    def fast_paged():
        return attention_triton.split_kv_paged(q[:, 0], paged, scale=scale, block_kv=attention_fast.FAST_BLOCK_KV,
                                               tokens_per_split=32, max_splits=splits)
    gap = float((ours().double() - sdpa().transpose(1, 2).double()).abs().max())
    samples = {name: triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="all")
               for name, fn in (("consistent", ours), ("sdpa", sdpa), ("consistent_paged", ours_paged),
                                ("fast_split_kv_paged", fast_paged))}
    return {"model": model, "B": batch, "C": context, "block_kv": block_kv, "max_abs_gap_vs_sdpa": gap,
            "samples_ms": samples}


def median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--seed", type=int, default=random.SystemRandom().randrange(2 ** 31))
    parser.add_argument("--block-kv", default="64", help="comma-separated block_kv values to check")
    parser.add_argument("--no-timing", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    generator, rng = torch.Generator(device=DEVICE).manual_seed(args.seed), random.Random(args.seed)
    run = {**provenance(), "seed": args.seed}
    log, timings = Log(), []
    check_row_sum(log, generator)
    for block_kv in [int(b) for b in args.block_kv.split(",")]:
        for model in MODELS:
            for context in CONTEXTS:
                check_attention(log, model, context, block_kv, generator, rng)
        if not args.no_timing:
            timings += [time_decode(model, b, c, block_kv, generator)
                        for model in MODELS for b in TIMING["batch"] for c in TIMING["context"]]
    (out / "gpu_kernel_check.json").write_text(json.dumps(
        {**run, "checks": log.records, "decode_timing": timings}, indent=1))
    print_tables(log, timings)
    print(f"seed {args.seed}; {len(log.records)} checks; {log.failures} required checks with bit mismatches")
    return 1 if log.failures else 0


def print_tables(log, timings):
    groups = {}
    for r in log.records:
        name = (r["op"], r.get("model", r.get("dtype")), r["case"], r["required"])
        total = groups.setdefault(name, [0, 0, 0.0])
        total[0] += 1
        total[1] += int(r["differing"] > 0)
        total[2] = max(total[2], r.get("rel_error_vs_fp64", r.get("max_abs_error_vs_fp64", 0.0)))
    print(f"{'op':<10}{'model/dtype':<16}{'case':<34}{'checks':>7}{'mismatched':>11}{'max err fp64':>14}")
    for (op, who, case, required), (count, bad, error) in groups.items():
        flag = "" if required else "  (info)"
        print(f"{op:<10}{str(who):<16}{case:<34}{count:>7}{bad:>11}{error:>14.2e}{flag}")
    if timings:
        print(f"\n{'decode timing':<14}{'B':>5}{'C':>6}{'ours us':>10}{'paged us':>10}{'fast us':>10}"
              f"{'SDPA us':>10}{'SDPA/ours':>10}{'fast/paged':>11}{'max gap':>10}")
        for t in timings:
            times = {name: median(samples) * 1e3 for name, samples in t["samples_ms"].items()}
            ours, paged, fast, sdpa = (times[n]
                                       for n in ("consistent", "consistent_paged", "fast_split_kv_paged", "sdpa"))
            print(f"{t['model']:<14}{t['B']:>5}{t['C']:>6}{ours:>10.1f}{paged:>10.1f}{fast:>10.1f}{sdpa:>10.1f}"
                  f"{sdpa / ours:>10.2f}{fast / paged:>11.2f}{t['max_abs_gap_vs_sdpa']:>10.1e}")


if __name__ == "__main__":
    sys.exit(main())
