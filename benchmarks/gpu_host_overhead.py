"""Host time per call of the CUDA ops the eager prefill runs, consistent vs fast, side by side:
where the eager prefill's wall time goes when its GPU kernels take the same time in both
contracts (benchmarks/HISTORY.md, session 6: 46 ms against 34 ms at batch 64).

  python benchmarks/gpu_host_overhead.py --out DIR      (on the device; one table last)

Each op is called CALLS times back to back without a synchronize; the host time of that loop
over CALLS is the cost of issuing one call (the launches queue up on the stream, so the GPU's
own time does not enter unless the queue fills: CALLS stays far below its depth). Rows at
M = 8 and 2048 (Qwen3-1.7B's qkv shape): the entry points' host work may follow M through the
launch table. Then one sequence's one-token Mamba decode (scan and conv) at nemotron-wide
widths, consistent vs fast, with the wall time per call (synchronized) beside the host time.
Raw samples (REPEATS per op), the environment and the commit go to DIR/gpu_host_overhead.json.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import kernels.ops.linear.cuda as linear_cuda  # noqa: E402
import kernels.ops.linear.triton as linear_triton  # noqa: E402
import kernels.ops.norm.triton as norm_triton  # noqa: E402
from benchmarks.raw_output import provenance  # noqa: E402
from kernels.contract import load_contract  # noqa: E402
from kernels.ops.linear.fast import fast as linear_fast  # noqa: E402

CALLS, REPEATS = 200, 7
N, K = 4096, 2048  # qwen3-1.7b qkv


@triton.jit
def _empty_kernel(x_ptr):
    pass  # the floor: what any Triton launch costs on the host


def host_us(call) -> list:
    """REPEATS samples of host microseconds per call."""
    call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        for _ in range(CALLS):
            call()
        samples.append((time.perf_counter() - started) / CALLS * 1e6)
        torch.cuda.synchronize()
    return samples


def synced_us(call) -> list:
    """REPEATS samples of wall microseconds per call, the GPU finished each time."""
    samples = []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(CALLS // 10):
            call()
            torch.cuda.synchronize()
        samples.append((time.perf_counter() - started) / (CALLS // 10) * 1e6)
    return samples


def ops(m: int) -> dict:
    """name -> zero-argument call, on bf16 operands of M rows."""
    x = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * 0.02
    norm_w = torch.ones(K, device="cuda", dtype=torch.bfloat16)
    tile = {"pointer": ((64, 64, 4, 4), 128), "tma": ((128, 128, 4, 4), 64), "persistent": ((128, 128, 4, 4), 64)}
    y = torch.empty(m, N, device="cuda", dtype=torch.bfloat16)
    consistent_op = load_contract("consistent").op("qkv_proj", "engine_prefill")
    fast_op = load_contract("fast").op("qkv_proj", "engine_prefill")
    calls = {
        "triton empty kernel (floor)": lambda: _empty_kernel[(1,)](x),
        "torch.matmul (cuBLAS)": lambda: torch.matmul(x, w.t()),
        "linear.fast (fast entry)": lambda: linear_fast(x, w),
        "contract fast qkv_proj (dispatch)": lambda: fast_op(x, w),
        "contract consistent qkv_proj (dispatch)": lambda: consistent_op(x, w),
        "linear_cuda.forward (launch table)": lambda: linear_cuda.forward(x, w),
        "3 host TensorDescriptors (built only)": lambda: (TensorDescriptor.from_tensor(x, [128, 64]),
                                                          TensorDescriptor.from_tensor(w, [128, 64]),
                                                          TensorDescriptor.from_tensor(y, [128, 128])),
        "norm consistent (Triton)": lambda: norm_triton.consistent(x, norm_w, eps=1e-6),
        "norm fast_fused (Triton)": lambda: norm_triton.fast_fused(x, norm_w, eps=1e-6),
    }
    for kernel, (config, block_k) in tile.items():
        calls[f"linear_triton.consistent {kernel}"] = (
            lambda kernel=kernel, config=config, block_k=block_k:
            linear_triton.consistent(x, w, config=config, block_k=block_k, kernel=kernel))
    return calls


def mamba_decode_ops(num_sequences: int = 64) -> dict:
    """name -> call: one Mamba layer's one-token decode at nemotron-wide-cut's widths (64 heads
    x 64, state 128, 8 groups, chunk 128), each sequence 60 rows into its chunk: one sequence
    on a per-sequence store (segment by segment) and `num_sequences` on the engine's pooled
    store (the batched forms). Each call resets the positions first (attribute writes, no
    tensor op), so every call does the same work."""
    from kernels.models.batch import Segment
    from kernels.models.mamba_pool import PooledMambaStore
    from kernels.models.mamba_state import MambaStateStore
    from kernels.ops.ssm_conv.consistent import consistent as ssm_conv_consistent
    from kernels.ops.ssm_conv.fast import fast_window_sum
    from kernels.ops.ssm_scan.consistent import consistent as ssm_scan_consistent
    from kernels.ops.ssm_scan.fast import fast_recurrent
    heads, head_dim, groups, state_size, chunk, held, taps = 64, 64, 8, 128, 128, 60, 4
    conv_dim = heads * head_dim + 2 * groups * state_size
    shape = dict(conv_rows=taps - 1, conv_dim=conv_dim, num_heads=heads, head_dim=head_dim,
                 state_size=state_size, num_groups=groups, chunk_size=chunk, dtype=torch.bfloat16, device="cuda")

    def rnd(*size, dtype=torch.bfloat16):
        return torch.randn(*size, device="cuda").to(dtype)
    dt_bias, a_log, d, conv_w, conv_b = (rnd(heads), torch.rand(heads, device="cuda"), rnd(heads), rnd(conv_dim, taps),
                                         rnd(conv_dim))

    def layer(store_type, count, buffers):
        """A call resetting `count` sequences to `held` rows in, then the door call(variant)."""
        store = store_type(**shape)
        rows = [rnd(held, heads, head_dim, dtype=torch.float32), rnd(held, groups, state_size, dtype=torch.float32),
                rnd(held, groups, state_size, dtype=torch.float32), torch.rand(held, heads, device="cuda") * 0.1]
        states = [store.open(Segment(seq, 0, 1, 0, "engine_prefill")) for seq in range(count)]
        for state in states:
            state.ssm, state.conv = rnd(heads, head_dim, state_size, dtype=torch.float32), rnd(taps - 1, conv_dim)
            state.pending = rows if buffers else None  # the pooled store copies them into its pool once
        segments = tuple(Segment(seq, held, 1, seq, "engine_decode") for seq in range(count))
        inputs = dict(x=rnd(count, heads, head_dim), B=rnd(count, groups, state_size),
                      C=rnd(count, groups, state_size), dt_raw=rnd(count, heads), xbc=rnd(count, conv_dim))

        def reset():  # attribute writes only
            for state in states:
                if store.pooled:
                    state.folded, state.buffered = (0, held) if buffers else (held, 0)
                else:
                    state.folded, state.pending = (0, rows) if buffers else (held, None)
            store._slot_tables = None
        return segments, store, inputs, reset

    def scan(variant, store_type, count, buffers):
        segments, store, i, reset = layer(store_type, count, buffers)

        def call():
            reset()
            variant(i["x"], i["B"], i["C"], i["dt_raw"], segments, store, dt_bias, a_log, d, chunk_size=chunk,
                    dt_min=0.001)
        return call

    def conv(variant, store_type, count):
        segments, store, i, reset = layer(store_type, count, False)

        def call():
            reset()
            variant(i["xbc"], segments, store, conv_w, conv_b)
        return call
    many = f"{num_sequences} sequences batched"
    return {"mamba decode: ssm_scan consistent, 1 sequence": scan(ssm_scan_consistent, MambaStateStore, 1, True),
            "mamba decode: ssm_scan fast_recurrent, 1 sequence": scan(fast_recurrent, MambaStateStore,
                                                                      1, False),
            "mamba decode: ssm_conv consistent, 1 sequence": conv(ssm_conv_consistent, MambaStateStore, 1),
            "mamba decode: ssm_conv fast_window_sum, 1 sequence": conv(fast_window_sum, MambaStateStore, 1),
            f"mamba decode: ssm_scan consistent, {many}": scan(ssm_scan_consistent, PooledMambaStore,
                                                               num_sequences, True),
            f"mamba decode: ssm_scan fast_recurrent, {many}": scan(fast_recurrent, PooledMambaStore,
                                                                   num_sequences, False),
            f"mamba decode: ssm_conv consistent, {many}": conv(ssm_conv_consistent, PooledMambaStore, num_sequences),
            f"mamba decode: ssm_conv fast_window_sum, {many}": conv(fast_window_sum, PooledMambaStore,
                                                                    num_sequences)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rows", default="8,2048")
    args = parser.parse_args()
    run = {**provenance(), "calls": CALLS, "repeats": REPEATS}
    records = []
    for m in map(int, args.rows.split(",")):
        for name, call in ops(m).items():
            records.append({"op": name, "m": m, "host_us": host_us(call)})
    for name, call in mamba_decode_ops().items():  # wall per call too: the replay's GPU time may lead
        rows = int(name.rsplit(", ", 1)[1].split()[0])  # the sequences decoded: one row each
        records.append({"op": name, "m": rows, "host_us": host_us(call), "synced_us": synced_us(call)})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_host_overhead.json").write_text(json.dumps({**run, "samples": records}, indent=1))
    print(f"host us per call, median of {REPEATS} x {CALLS} calls ({run['environment']['device']}, {run['commit']})")
    for record in records:
        synced = f"{statistics.median(record['synced_us']):8.1f} synced" if "synced_us" in record else ""
        print(f"  M={record['m']:>5}  {record['op']:<50} {statistics.median(record['host_us']):8.1f} {synced}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
