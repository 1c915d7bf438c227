"""Device check of DeepSeek-V4's consistent Triton kernels (kernels/ops/sink_attention/triton.py,
block_topk/triton.py) on CUDA at the release's widths, bit for bit (int views).

  python benchmarks/gpu_deepseek_kernel_check.py --out DIR   (on the device; exits 1 on any bit mismatch)

The attention core (64 heads of 512, entries: window 128 + Top-512, a fifth masked): a query
alone == in batches of 2..256 at both ends == the trainer's autograd forward. The indexer's block
scores (64 heads of 128 over 2,048 blocks): a query alone == in batches; a block's score the same
whatever the number of blocks held (a phase holds fewer). Error vs float64 recorded. A CPU smoke
run under TRITON_INTERPRET=1 may set gpu_kernel_check's DEVICE and DTYPE and a small DEEPSEEK here.
"""
import argparse
import json
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import benchmarks.gpu_kernel_check as k  # noqa: E402
from benchmarks.raw_output import provenance  # noqa: E402
from gates.reference.block_topk import scores as exact_scores  # noqa: E402
from gates.reference.sink_attention import attend as sink_attend  # noqa: E402
from kernels.ops.block_topk import triton as block_score_triton  # noqa: E402
from kernels.ops.sink_attention import triton as sink_attention_triton  # noqa: E402

# (heads, head_dim, entries: window 128 + Top-512, rows, indexer heads, its dim, blocks)
DEEPSEEK = (64, 512, 128 + 512, 256, 64, 128, 2048)


def check_deepseek(log, generator):
    """sink_attention and block_score at DeepSeek-V4-Flash's widths: rows alone and in batches."""
    heads, dim, length, rows, index_heads, index_dim, blocks = DEEPSEEK
    q = torch.randn(rows, heads, dim, device=k.DEVICE, generator=generator).to(k.DTYPE)
    entries = torch.randn(rows, length, dim, device=k.DEVICE, generator=generator).to(k.DTYPE)
    valid = torch.rand(rows, length, device=k.DEVICE, generator=generator) < 0.8
    sinks = torch.randn(heads, device=k.DEVICE, generator=generator)
    scale = dim ** -0.5
    batch = sink_attention_triton.launch(q, entries, valid, sinks, scale=scale)
    reference = sink_attend(q[:8].cpu(), entries[:8].cpu(), valid[:8].cpu(), sinks.cpu(), scale=scale)
    error = float((batch[:8].double().cpu() - reference).abs().max() / reference.abs().max())
    base = {"op": "sink_attn", "dtype": str(k.DTYPE), "rel_error_vs_fp64": error}
    for count in (1, 2, 7, rows // 4, rows - 1):
        for offset in {0, rows - count}:
            part = slice(offset, offset + count)
            log.check(True, sink_attention_triton.launch(q[part], entries[part], valid[part], sinks, scale=scale),
                      batch[part], **base, case="batch", rows=count, offset=offset)
    leaves = [t.clone().requires_grad_() for t in (q[:16], entries[:16])]
    trained = sink_attention_triton.consistent(leaves[0], leaves[1], valid[:16], sinks, scale=scale)
    log.check(True, trained.detach(), batch[:16], **base, case="trainer's autograd forward")
    iq = torch.randn(rows, index_heads, index_dim, device=k.DEVICE, generator=generator).to(k.DTYPE)
    keys = torch.randn(blocks, index_dim, device=k.DEVICE, generator=generator).to(k.DTYPE)
    weights = torch.randn(rows, index_heads, device=k.DEVICE, generator=generator)
    scale = index_dim ** -0.5
    scores = block_score_triton.score(iq, keys, weights, scale=scale)
    exact = exact_scores(iq[:8], keys, weights[:8], scale=scale)
    base = {"op": "blk_score", "dtype": str(k.DTYPE),
            "rel_error_vs_fp64": float((scores[:8].double() - exact).abs().max() / exact.abs().max())}
    for count in (1, 3, rows // 4, rows - 1):
        log.check(True, block_score_triton.score(iq[:count], keys, weights[:count], scale=scale), scores[:count],
                  **base, case="batch", rows=count)
    for held in (1, 31, 33, blocks // 2, blocks - 1):
        log.check(True, block_score_triton.score(iq, keys[:held], weights, scale=scale), scores[:, :held],
                  **base, case="blocks held", blocks=held)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--seed", type=int, default=random.SystemRandom().randrange(2 ** 31))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = k.Log()
    check_deepseek(log, torch.Generator(device=k.DEVICE).manual_seed(args.seed))
    (out / "gpu_deepseek_kernel_check.json").write_text(json.dumps(
        {**provenance(), "seed": args.seed, "checks": log.records}, indent=1))
    k.print_tables(log, [])
    print(f"seed {args.seed}; {len(log.records)} checks; {log.failures} required checks with bit mismatches")
    return 1 if log.failures else 0


if __name__ == "__main__":
    sys.exit(main())
