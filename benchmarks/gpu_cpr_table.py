"""The CPR table (issue 27): one Gated DeltaNet layer's delta rule four ways, side by side, per stage.

    python3 benchmarks/gpu_cpr_table.py --out DIR [--config qwen3_5-wide-cut] [--sequences 8]
        [--train-tokens 1024] [--prompt-len 1024] [--decode-batch 64] [--decode-steps 32]
        [--repeats 5] [--device cuda|cpu]

SkyRL IsoExec reports its chunkwise-parallel decode (CPR) against the native mixed stack per stage;
this is that table for kernels/ops/gated_delta at the config's widths (heads, dims, chunk):
- native_mixed: the fast contract (chunks from each call's first row for the trainer and prefill,
  the one-step recurrence for decode, every sequence at once on the engine's pools);
- chunkwise_everywhere: the same, but every decode step runs the chunk form on its one new row
  (zero-padded to a chunk, all sequences in one batched call);
- recurrent_everywhere: the recurrence row by row in every stage (torch's step form: no fused
  recurrent kernel, so its trainer and prefill are launch-bound on a GPU);
- ours: the consistent contract (chunks at absolute positions; on CUDA the row kernel of
  kernels/ops/gated_delta/triton.py in every stage, a decode step computing its one row; on CPU
  the unfinished chunk kept and re-played at decode).
Stages: trainer forward + backward over `sequences` x `train_tokens` rows; prefill of the same;
decode: `decode_steps` steps of `decode_batch` sequences after a `prompt_len` prefill (per step).
The gates (A_log, dt_bias) and inputs are seeded; the stages time the region's call alone (the
short conv and projections are other regions). Each repeat runs the four ways in rotating order;
medians and each way over native_mixed are printed, raw samples saved first with the commit.
--device cpu (the cut's config, small shapes) is a smoke test, not a figure.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.raw_output import provenance, write_raw  # noqa: E402
from kernels.models.batch import Segment  # noqa: E402
from kernels.models.config import load_model_config  # noqa: E402
from kernels.models.mamba_pool import delta_store  # noqa: E402
from kernels.ops.gated_delta import KEEPS_UNFINISHED_CHUNK, region  # noqa: E402
from kernels.ops.gated_delta.forms import chunk, prepared  # noqa: E402


def chunkwise_decode(q, k, v, a, b, segments, store, A_log, dt_bias, *, chunk_size):
    """Every sequence's new row through the chunk form from its folded state: the row zero-padded
    to a chunk (g = beta = 0 past it), all sequences in one batched call on the pools."""
    g, beta = region._gates(a, b, A_log, dt_bias, F.softplus, torch.sigmoid)
    slots = store.decode_slots(segments)
    rows = [torch.cat([r[:, None], r.new_zeros(r.shape[0], chunk_size - 1, *r.shape[1:])], dim=1)
            for r in prepared(q, k, v, g, beta)]
    y, end = chunk(*rows, store.ssm[slots])
    store.ssm[slots] = end
    return y[:, 0].to(q.dtype)


VARIANTS = {"fast_chunked": region.fast_chunked, "fast_recurrent": region.fast_recurrent,
            "consistent": region.consistent, "chunkwise": chunkwise_decode}
WAYS = {"native_mixed": ("fast_chunked", "fast_chunked", "fast_recurrent"),
        "chunkwise_everywhere": ("fast_chunked", "fast_chunked", "chunkwise"),
        "recurrent_everywhere": ("fast_recurrent", "fast_recurrent", "fast_recurrent"),
        "ours": ("consistent", "consistent", "consistent")}  # (trainer, prefill, decode)
STAGES = ("trainer", "prefill", "decode")


class Layer:
    """One DeltaNet layer's shapes, gates and seeded inputs on a device."""

    def __init__(self, config, device, dtype, seed=0):
        self.config, self.device, self.dtype = config, device, dtype
        self.key_heads, self.heads = config.linear_num_key_heads, config.linear_num_value_heads
        self.key_dim, self.value_dim = config.linear_key_head_dim, config.linear_value_head_dim
        self.chunk = config.chunk_size
        self.generator = torch.Generator().manual_seed(seed)
        self.A_log = (torch.rand(self.heads, generator=self.generator) * 2).to(device)
        self.dt_bias = (torch.rand(self.heads, generator=self.generator) - 3).to(device)

    def rows(self, count):
        """(q, k, v, a, b) of `count` rows."""
        shapes = ((self.key_heads, self.key_dim), (self.key_heads, self.key_dim), (self.heads, self.value_dim),
                  (self.heads,), (self.heads,))
        return tuple(torch.randn(count, *shape, generator=self.generator).to(self.device, self.dtype)
                     for shape in shapes)

    def store(self, pooled):
        return delta_store(conv_rows=self.config.linear_conv_kernel - 1, conv_dim=8, num_heads=self.heads,
                           key_dim=self.key_dim, value_dim=self.value_dim, dtype=self.dtype, device=self.device,
                           chunk_size=self.chunk, pooled=pooled)

    def call(self, name, rows, segments, store):
        return VARIANTS[name](*rows, segments, store, self.A_log, self.dt_bias, chunk_size=self.chunk)


def _segments(count, length, start, case):
    return tuple(Segment(seq_id=i, start=start, length=length, row=i * length, case=case) for i in range(count))


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_stage(layer, name, stage, args):
    """Seconds of one stage under variant `name` (per step for decode)."""
    device = layer.device
    if stage == "trainer":
        rows = [t.requires_grad_() for t in layer.rows(args.sequences * args.train_tokens)]
        segments = _segments(args.sequences, args.train_tokens, 0, "trainer_fwd")
        store, weights = layer.store(pooled=False), torch.randn(rows[2].shape, device=device, dtype=layer.dtype)
        _sync(device)
        start = time.perf_counter()
        (layer.call(name, rows, segments, store).float() * weights).sum().backward()
        _sync(device)
        return time.perf_counter() - start
    if stage == "prefill":
        rows, store = layer.rows(args.sequences * args.prompt_len), layer.store(pooled=True)
        segments = _segments(args.sequences, args.prompt_len, 0, "engine_prefill")
        _sync(device)
        start = time.perf_counter()
        layer.call(name, rows, segments, store)
        _sync(device)
        return time.perf_counter() - start
    keeps = name in KEEPS_UNFINISHED_CHUNK
    store, prompt = layer.store(pooled=True), _segments(args.decode_batch, args.prompt_len, 0, "engine_prefill")
    prefill = WAYS_BY_DECODE[name]
    layer.call(prefill, layer.rows(args.decode_batch * args.prompt_len), prompt, store)
    store.settle(prompt, keeps_unfinished_chunk=keeps)
    steps = [layer.rows(args.decode_batch) for _ in range(args.decode_steps)]
    _sync(device)
    start = time.perf_counter()
    for step, rows in enumerate(steps):
        segments = tuple(Segment(seq_id=i, start=args.prompt_len + step, length=1, row=i, case="engine_decode")
                         for i in range(args.decode_batch))
        layer.call(name, rows, segments, store)
        store.settle(segments, keeps_unfinished_chunk=keeps)
    _sync(device)
    return (time.perf_counter() - start) / args.decode_steps


WAYS_BY_DECODE = {"fast_recurrent": "fast_chunked", "chunkwise": "fast_chunked", "consistent": "consistent"}
"""The prefill a decode variant's store starts from (a fast decode folds everything; ours keeps rows)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--config", default=None, help="default: qwen3_5-wide-cut on cuda, qwen3_5-cut on cpu")
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--train-tokens", type=int, default=1024)
    parser.add_argument("--prompt-len", type=int, default=1024)
    parser.add_argument("--decode-batch", type=int, default=64)
    parser.add_argument("--decode-steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    args.config = args.config or ("qwen3_5-wide-cut" if device.type == "cuda" else "qwen3_5-cut")
    config = load_model_config(args.config)
    layer = Layer(config, device, torch.bfloat16 if device.type == "cuda" else torch.float32)
    samples = {way: {stage: [] for stage in STAGES} for way in WAYS}
    for way, names in WAYS.items():  # warm-up: compiles, allocator
        for stage, name in zip(STAGES, names):
            time_stage(layer, name, stage, args)
    for repeat in range(args.repeats):
        order = list(WAYS)[repeat % len(WAYS):] + list(WAYS)[:repeat % len(WAYS)]
        for way in order:
            for stage, name in zip(STAGES, WAYS[way]):
                samples[way][stage].append(time_stage(layer, name, stage, args))
    raw = {**provenance(), "args": vars(args), "ways": WAYS, "samples_s": samples}
    write_raw(raw, args.out, "gpu_cpr_table")
    medians = {way: {stage: statistics.median(v) for stage, v in stages.items()} for way, stages in samples.items()}
    print(f"{'way':<22}" + "".join(f"{stage + ' ms':>14}{'/ native':>9}" for stage in STAGES))
    for way, stages in medians.items():
        print(f"{way:<22}" + "".join(f"{1e3 * stages[s]:>14.3f}{stages[s] / medians['native_mixed'][s]:>9.2f}"
                                     for s in STAGES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
