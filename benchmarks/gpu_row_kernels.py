"""The row kernels of an attention layer on CUDA (RMSNorm, RoPE on q and k, the paged K/V
write), this tree's against a reference commit's, bits and time side by side; the fused q/k
norm + RoPE against this tree's three launches it replaces (the same bits required).

    python3 benchmarks/gpu_row_kernels.py --out DIR [--ref COMMIT] [--rows 128,38400]

The reference commit's norm/triton.py and rope/triton.py are loaded from git (`git show`)
as modules of their own; the K/V write's reference is the two torch scatters. At Qwen3-1.7B's
widths (hidden 2048, 16/8 heads x 128) and Nemotron's hidden 2688, for each row count (a
decode step's, a prefill's): RoPE and the K/V write must equal their references bit for bit
(elementwise copies and rotations); the norm's bits may move (a tile of rows per program
regroups no row's sum, but tl.sum's lane tree follows the tile's layout), so its check is
batch invariance on the device: every row alone, in slices at odd offsets and in the whole
batch, bit for bit (int views), plus the count of elements that moved against the reference.
Times are do_bench medians per call; raw samples saved. Exit 1 on a required mismatch
(a norm row that follows its batch, RoPE or the K/V write off their references).
"""
import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import kernels.ops.norm.triton as norm_triton  # noqa: E402
import kernels.ops.rope.triton as rope_triton  # noqa: E402
from benchmarks.raw_output import provenance, write_raw  # noqa: E402
from kernels.ops import kv_write_triton, qk_norm_rope_triton  # noqa: E402
from kernels.ops.rope.consistent import _device_table  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM = 16, 8, 128
HIDDEN = (2048, 2688)
DEVICE, DTYPE = "cuda", torch.bfloat16  # --device cpu (TRITON_INTERPRET=1, fp32, small rows): a smoke test


def reference_module(commit: str, name: str, folder: str):
    """kernels/ops/<name>.py as it was at `commit` (<family>/triton, or <family>_triton before the
    family folders), imported under another name."""
    shown = subprocess.run(["git", "show", f"{commit}:kernels/ops/{name}.py"], capture_output=True, text=True)
    if shown.returncode:
        shown = subprocess.run(["git", "show", f"{commit}:kernels/ops/{name.replace('/', '_')}.py"],
                               capture_output=True, text=True, check=True)
    flat = name.replace("/", "_")
    path = Path(folder) / f"ref_{flat}.py"
    path.write_text(shown.stdout)
    spec = importlib.util.spec_from_file_location(f"ref_{flat}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def differing(a, b) -> int:
    view = {2: torch.int16, 4: torch.int32}[a.element_size()]
    return int((a.contiguous().view(view) != b.contiguous().view(view)).sum())


def median_ms(fn) -> tuple:
    samples = do_bench(fn, return_mode="all") if DEVICE == "cuda" else [_once_ms(fn)]
    return sorted(samples)[len(samples) // 2], samples


def _once_ms(fn) -> float:
    started = time.perf_counter()
    fn()
    return 1e3 * (time.perf_counter() - started)


def check_norm(ref, rows, width, residual, generator, log):
    x = torch.randn(rows, width, generator=generator).to(DEVICE, DTYPE)
    res = torch.randn(rows, width, generator=generator).to(DEVICE, DTYPE) if residual else None
    w = (1 + 0.1 * torch.randn(width, generator=generator)).to(DEVICE, DTYPE)
    whole, _ = norm_triton.consistent(x, w, eps=1e-6, residual=res)
    moved = 0
    for lo, hi in ((0, 1), (rows - 1, rows), (3, min(rows, 3 + 37)), (rows // 2, rows)):
        if lo >= hi:
            continue
        part, _ = norm_triton.consistent(x[lo:hi], w, eps=1e-6, residual=None if res is None else res[lo:hi])
        moved += differing(part, whole[lo:hi])
    old, _ = ref.consistent(x, w, eps=1e-6, residual=res)
    new_ms, new_samples = median_ms(lambda: norm_triton.consistent(x, w, eps=1e-6, residual=res))
    old_ms, old_samples = median_ms(lambda: ref.consistent(x, w, eps=1e-6, residual=res))
    log.append({"kernel": f"norm w{width}{' +res' if residual else ''}", "rows": rows, "batch_variant": moved,
                "vs_ref_differing": differing(old, whole), "new_ms": new_ms, "ref_ms": old_ms,
                "new_samples": new_samples, "ref_samples": old_samples, "ok": moved == 0})


def check_head_norm(ref, tokens, heads, generator, log):
    """qk-norm: [T, H, 128] rows of a strided view (q out of the fused qkv)."""
    qkv = torch.randn(tokens, (heads + 2 * KV_HEADS) * HEAD_DIM, generator=generator).to(DEVICE, DTYPE)
    q = qkv[:, :heads * HEAD_DIM].view(tokens, heads, HEAD_DIM)
    w = (1 + 0.1 * torch.randn(HEAD_DIM, generator=generator)).to(DEVICE, DTYPE)
    whole, _ = norm_triton.consistent(q, w, eps=1e-6)
    moved = sum(differing(norm_triton.consistent(q[lo:hi], w, eps=1e-6)[0], whole[lo:hi])
                for lo, hi in ((0, 1), (tokens - 1, tokens), (tokens // 3, tokens)))
    old, _ = ref.consistent(q, w, eps=1e-6)
    new_ms, new_samples = median_ms(lambda: norm_triton.consistent(q, w, eps=1e-6))
    old_ms, old_samples = median_ms(lambda: ref.consistent(q, w, eps=1e-6))
    log.append({"kernel": f"qk-norm {heads}x{HEAD_DIM}", "rows": tokens, "batch_variant": moved,
                "vs_ref_differing": differing(old, whole), "new_ms": new_ms, "ref_ms": old_ms,
                "new_samples": new_samples, "ref_samples": old_samples, "ok": moved == 0})


def check_rope(ref, tokens, generator, log):
    qkv = torch.randn(tokens, (HEADS + 2 * KV_HEADS) * HEAD_DIM, generator=generator).to(DEVICE, DTYPE)
    q = qkv[:, :HEADS * HEAD_DIM].view(tokens, HEADS, HEAD_DIM)
    k = torch.randn(tokens, KV_HEADS, HEAD_DIM, generator=generator).to(DEVICE, DTYPE)
    positions = torch.randint(0, 40960, (tokens,), generator=generator).to(DEVICE)
    cos, sin = _device_table(1e6, HEAD_DIM, 40960, torch.device(DEVICE))
    for name, new_fn, ref_fn in (
            ("rope consistent", lambda: rope_triton.consistent(q, k, positions, cos, sin),
             lambda: ref.consistent(q, k, positions, cos, sin)),
            ("rope fast", lambda: rope_triton.fast(q, k, positions, 1e6), lambda: ref.fast(q, k, positions, 1e6))):
        (nq, nk), (oq, ok) = new_fn(), ref_fn()
        moved = differing(nq, oq) + differing(nk, ok)
        new_ms, new_samples = median_ms(new_fn)
        old_ms, old_samples = median_ms(ref_fn)
        log.append({"kernel": name, "rows": tokens, "vs_ref_differing": moved, "new_ms": new_ms, "ref_ms": old_ms,
                    "new_samples": new_samples, "ref_samples": old_samples, "ok": moved == 0})


def check_qk_norm_rope(tokens, generator, log):
    """The fused q/k norm + RoPE against this tree's three launches (norm q, norm k, rope):
    the same bits required, both contracts' rotations; the time of one against the three."""
    qkv = torch.randn(tokens, (HEADS + 2 * KV_HEADS) * HEAD_DIM, generator=generator).to(DEVICE, DTYPE)
    q = qkv[:, :HEADS * HEAD_DIM].view(tokens, HEADS, HEAD_DIM)
    k = qkv[:, HEADS * HEAD_DIM:(HEADS + KV_HEADS) * HEAD_DIM].view(tokens, KV_HEADS, HEAD_DIM)
    q_w, k_w = ((1 + 0.1 * torch.randn(HEAD_DIM, generator=generator)).to(DEVICE, DTYPE) for _ in range(2))
    positions = torch.randint(0, 40960, (tokens,), generator=generator).to(DEVICE)
    cos, sin = _device_table(1e6, HEAD_DIM, 40960, torch.device(DEVICE))
    for name, tables, theta in (("qk-norm+rope consistent", {"cos_table": cos, "sin_table": sin}, 0.0),
                                ("qk-norm+rope fast", {}, 1e6)):
        def three():
            q_n, k_n = norm_triton.launch(q, q_w, 1e-6)[0], norm_triton.launch(k, k_w, 1e-6)[0]
            return (q_n, k_n, *rope_triton.launch(q_n, k_n, positions, theta=theta, **tables))

        def one():
            return qk_norm_rope_triton.launch(q, k, q_w, k_w, positions, eps=1e-6, theta=theta, **tables)
        moved = sum(differing(a, b) for a, b in zip(one(), three()))
        new_ms, new_samples = median_ms(one)
        old_ms, old_samples = median_ms(three)
        log.append({"kernel": name, "rows": tokens, "vs_ref_differing": moved, "new_ms": new_ms, "ref_ms": old_ms,
                    "new_samples": new_samples, "ref_samples": old_samples, "ok": moved == 0})


def check_kv_write(tokens, generator, log):
    qkv = torch.randn(tokens, (HEADS + 2 * KV_HEADS) * HEAD_DIM, generator=generator).to(DEVICE, DTYPE)
    v = qkv[:, (HEADS + KV_HEADS) * HEAD_DIM:].view(tokens, KV_HEADS, HEAD_DIM)
    k = torch.randn(tokens, KV_HEADS, HEAD_DIM, generator=generator).to(DEVICE, DTYPE)
    slots = torch.randperm(2 * tokens, generator=generator)[:tokens].to(DEVICE)
    pools = [torch.full((2 * tokens, KV_HEADS, HEAD_DIM), float("nan"), dtype=DTYPE, device=DEVICE)
             for _ in range(4)]
    assert kv_write_triton.scatter(pools[0], pools[1], slots, k, v)
    pools[2][slots], pools[3][slots] = k, v

    def torch_write():
        pools[2][slots] = k
        pools[3][slots] = v

    moved = differing(pools[0], pools[2]) + differing(pools[1], pools[3])
    new_ms, new_samples = median_ms(lambda: kv_write_triton.scatter(pools[0], pools[1], slots, k, v))
    old_ms, old_samples = median_ms(torch_write)
    log.append({"kernel": "kv write", "rows": tokens, "vs_ref_differing": moved, "new_ms": new_ms, "ref_ms": old_ms,
                "new_samples": new_samples, "ref_samples": old_samples, "ok": moved == 0})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--ref", default="HEAD~1", help="the commit whose kernels are the reference")
    parser.add_argument("--rows", default="128,38400", help="row (token) counts: a decode step's, a prefill's")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    global DEVICE, DTYPE
    if args.device != "cuda":
        DEVICE, DTYPE = args.device, torch.float32
    generator, log = torch.Generator().manual_seed(20261203), []
    with tempfile.TemporaryDirectory() as folder:
        ref_norm, ref_rope = (reference_module(args.ref, name, folder) for name in ("norm/triton", "rope/triton"))
        for rows in (int(r) for r in args.rows.split(",")):
            for width in HIDDEN:
                check_norm(ref_norm, rows, width, True, generator, log)
            check_norm(ref_norm, rows, HIDDEN[0], False, generator, log)
            check_head_norm(ref_norm, rows, HEADS, generator, log)
            check_head_norm(ref_norm, rows, KV_HEADS, generator, log)
            check_rope(ref_rope, rows, generator, log)
            check_qk_norm_rope(rows, generator, log)
            check_kv_write(rows, generator, log)
    write_raw({"ref": args.ref, "results": log, **provenance()}, args.out, "gpu_row_kernels")
    print(f"{'kernel':<22} {'rows':>6} {'ours us':>8} {'ref us':>8} {'ratio':>6} {'moved vs ref':>12} {'check':>6}")
    failed = 0
    for r in log:
        failed += not r["ok"]
        print(f"{r['kernel']:<22} {r['rows']:>6} {1e3 * r['new_ms']:>8.1f} {1e3 * r['ref_ms']:>8.1f} "
              f"{r['new_ms'] / r['ref_ms']:>6.2f} {r['vs_ref_differing']:>12} {'ok' if r['ok'] else 'FAIL':>6}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
