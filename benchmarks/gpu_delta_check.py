"""Device check of the consistent Gated DeltaNet row kernel (kernels/ops/gated_delta/triton.py) at a
config's widths, bit for bit (int views), and its decode step timed against the fast recurrence.

    python3 benchmarks/gpu_delta_check.py --out DIR [--config qwen3_5-wide-cut] [--length 300]
        [--decode-batch 64] [--device cuda]      (exits 1 on any bit difference)

Bits: one sequence scanned whole (SOLVE then APPLY) == split before, at and after chunk boundaries
== prefill then row-by-row decodes (WALK) == its rows inside a batched pooled decode of other
sequences at every place in their chunks; sequences in one call == each alone: y, S and the kept
rows. The float64 recurrence's error is
recorded (not judged here: the gates' tolerance is C08's). Timing: one decode step of
`decode-batch` sequences, ours (decode_pooled) against the fast contract's batched recurrence
(recurrent_pooled's step), and a prefill of 8 x 1,024 rows in one call against a call per
sequence, do_bench medians, raw samples saved with the commit. With
TRITON_INTERPRET=1 and --device cpu --config qwen3_5-cut it is a logic smoke test (no timing).
"""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.raw_output import provenance, write_raw  # noqa: E402
from gates.compare import bit_view  # noqa: E402
from gates.reference.gated_delta import delta_rule  # noqa: E402
from kernels.models.config import load_model_config  # noqa: E402
from kernels.ops.gated_delta import triton as delta_triton  # noqa: E402
from kernels.ops.gated_delta.forms import DeltaState, kept_row_shapes, prepared, step  # noqa: E402


def differing(left, right) -> int:
    """Elements whose bits differ."""
    return int((bit_view(left) != bit_view(right)).sum())


def raw_rows(config, length, generator, device):
    heads, key_heads = config.linear_num_value_heads, config.linear_num_key_heads
    key_dim, value_dim = config.linear_key_head_dim, config.linear_value_head_dim
    rows = (torch.randn(length, key_heads, key_dim, generator=generator),
            torch.randn(length, key_heads, key_dim, generator=generator),
            torch.randn(length, heads, value_dim, generator=generator),
            -torch.rand(length, heads, generator=generator) * 0.5,
            torch.rand(length, heads, generator=generator))
    return tuple(t.to(device) for t in rows)


def in_calls(rows, cuts, chunk):
    """Prepared rows cut at `cuts`, each piece one kernel call after the state the last left:
    (every row's y, the state after the last)."""
    heads, key_dim, value_dim = rows[2].shape[1], rows[0].shape[-1], rows[2].shape[-1]
    state, outputs = DeltaState.empty(heads, key_dim, value_dim, device=rows[0].device), []
    for lo, hi in zip([0, *cuts], [*cuts, rows[0].shape[0]]):
        y, state = delta_triton.consistent(*(t[lo:hi] for t in rows), state, chunk_size=chunk)
        outputs.append(y)
    return torch.cat(outputs), state


def check_phases(config, length, generator, device) -> dict:
    chunk = config.chunk_size
    raw = raw_rows(config, length, generator, device)
    rows = prepared(*raw)
    whole, whole_state = in_calls(rows, [], chunk)
    cases = {"split before a boundary": [chunk - 1, 2 * chunk + 3], "split at boundaries": [chunk, 3 * chunk],
             "split after a boundary": [chunk + 1, 2 * chunk + 1],
             "decode row by row": list(range(length - chunk - 5, length))}
    found = {}
    for name, cuts in cases.items():
        y, state = in_calls(rows, cuts, chunk)
        kept = sum(differing(a, b) for a, b in zip(state.pending or (), whole_state.pending or ()))
        found[name] = {"y": differing(y, whole), "S": differing(state.ssm, whole_state.ssm), "kept": kept}
    expected = delta_rule(*(t.cpu() for t in raw))
    error = float((whole.double().cpu() - expected).abs().max() / expected.abs().max())
    return {"cases": found, "float64_error": error, "whole": whole, "state": whole_state}


def check_batched(config, generator, device, batch) -> dict:
    """Sequence 0 alone vs inside a pooled decode of `batch` sequences at every place in their chunks."""
    chunk, heads = config.chunk_size, config.linear_num_value_heads
    key_dim, value_dim = config.linear_key_head_dim, config.linear_value_head_dim
    histories = [(3 * i + 1) % (2 * chunk) + chunk // 2 for i in range(batch)]
    steps = chunk + 2
    sequences = [prepared(*raw_rows(config, h + steps, generator, device)) for h in histories]
    pools = [torch.zeros(batch + 1, chunk, *shape, device=device) for shape in kept_row_shapes(heads, key_dim,
                                                                                                value_dim)]
    ssm = torch.zeros(batch + 1, heads, key_dim, value_dim, device=device)
    slots = torch.randperm(batch, generator=generator).to(device)
    alone = []
    for seq, (rows, h) in enumerate(zip(sequences, histories)):
        _, state = delta_triton.consistent(*(t[:h] for t in rows), DeltaState.empty(heads, key_dim, value_dim,
                                                                                     device=device), chunk_size=chunk)
        ssm[slots[seq]] = state.ssm
        for pool, kept in zip(pools, state.pending or ()):
            pool[slots[seq], :kept.shape[0]] = kept
        alone.append(in_calls(rows, [h, *range(h + 1, h + steps)], chunk)[0][h:])
    outputs = []
    for t in range(steps):
        new = [torch.stack([rows[h + t] for rows, h in zip(seq_rows, histories)]) for seq_rows in zip(*sequences)]
        held = torch.tensor([(h + t) % chunk for h in histories], device=device)
        outputs.append(delta_triton.decode_pooled(*new, slots, held, pools, ssm, chunk_size=chunk))
    batched = torch.stack(outputs, dim=1)
    return {"sequences": batch, "steps": steps,
            "differing": sum(differing(batched[seq], alone[seq]) for seq in range(batch))}


def check_many(config, generator, device, count) -> dict:
    """`count` sequences in one consistent_many call (starting fresh, mid-chunk and on a boundary, of
    lengths inside one chunk and across several) vs each alone: y, S and the kept rows."""
    chunk = config.chunk_size
    histories = [(0, chunk // 2 + 1, chunk, chunk + 3)[i % 4] for i in range(count)]
    lengths = [(5 * chunk + 7, chunk - 9, 1, 2 * chunk)[i % 4] + i for i in range(count)]
    sequences = [prepared(*raw_rows(config, h + n, generator, device)) for h, n in zip(histories, lengths)]
    starts, alone = [], []
    for rows, h in zip(sequences, histories):
        state = in_calls([t[:h] for t in rows], [], chunk)[1] if h else DeltaState.empty(
            rows[2].shape[1], rows[0].shape[-1], rows[2].shape[-1], device=device)
        starts.append(state)
        alone.append(delta_triton.consistent(*(t[h:] for t in rows), state, chunk_size=chunk))
    new = [torch.cat(parts) for parts in zip(*[[t[h:] for t in rows] for rows, h in zip(sequences, histories)])]
    y, after = delta_triton.consistent_many(*new, lengths, starts, chunk_size=chunk)
    found, lo = 0, 0
    for (y_alone, state), mine, n in zip(alone, after, lengths):
        found += differing(y[lo:lo + n], y_alone) + differing(mine.ssm, state.ssm)
        found += sum(differing(a, b) for a, b in zip(mine.pending or (), state.pending or ()))
        found += int((mine.pending is None) != (state.pending is None))
        lo += n
    return {"sequences": count, "rows": sum(lengths), "differing": found}


def time_prefill(config, generator, device, sequences, length) -> dict:
    """A prefill of `sequences` x `length` rows: one consistent_many call against a call per sequence."""
    import triton.testing
    rows = prepared(*raw_rows(config, sequences * length, generator, device))
    empty = [DeltaState.empty(rows[2].shape[1], rows[0].shape[-1], rows[2].shape[-1], device=device)
             for _ in range(sequences)]
    chunk = config.chunk_size

    def each():
        for i in range(sequences):
            delta_triton.consistent(*(t[i * length:(i + 1) * length] for t in rows), empty[i], chunk_size=chunk)

    def together():
        delta_triton.consistent_many(*rows, [length] * sequences, empty, chunk_size=chunk)
    return {f"prefill {sequences} x {length}, one call": triton.testing.do_bench(together, return_mode="all"),
            f"prefill {sequences} x {length}, a call each": triton.testing.do_bench(each, return_mode="all")}


def time_decode(config, generator, device, batch) -> dict:
    """One decode step of `batch` sequences mid-chunk: ours vs the fast batched recurrence step."""
    import triton.testing
    chunk, heads = config.chunk_size, config.linear_num_value_heads
    key_dim, value_dim = config.linear_key_head_dim, config.linear_value_head_dim
    rows = prepared(*raw_rows(config, batch, generator, device))
    pools = [torch.randn(batch, chunk, *shape, generator=generator).to(device) * 0.1
             for shape in kept_row_shapes(heads, key_dim, value_dim)]
    ssm = torch.randn(batch, heads, key_dim, value_dim, generator=generator).to(device) * 0.1
    slots = torch.arange(batch, device=device)
    samples = {}
    for place in (1, chunk // 2, chunk - 2):
        held = torch.full((batch,), place, device=device)
        ours = triton.testing.do_bench(lambda: delta_triton.decode_pooled(*rows, slots, held, pools, ssm,
                                                                          chunk_size=chunk), return_mode="all")
        samples[f"decode step, ours at place {place}"] = ours
    samples["decode step, fast recurrence"] = triton.testing.do_bench(lambda: step(*rows, ssm), return_mode="all")
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--config", default="qwen3_5-wide-cut")
    parser.add_argument("--length", type=int, default=300)
    parser.add_argument("--decode-batch", type=int, default=64)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config, device = load_model_config(args.config), torch.device(args.device)
    generator = torch.Generator().manual_seed(args.seed)
    phases = check_phases(config, args.length, generator, device)
    batched = check_batched(config, generator, device, min(args.decode_batch, 16))
    many = check_many(config, generator, device, 8)
    record = {**provenance(), "args": vars(args), "phases": phases["cases"],
              "float64_error": phases["float64_error"], "batched": batched, "many": many}
    path = write_raw(record, args.out, "gpu-delta-check")  # the bits first, then again with the timing
    if device.type == "cuda":
        record["timing_ms"] = {**time_decode(config, generator, device, args.decode_batch),
                               **time_prefill(config, generator, device, 8, 1024)}
        path.write_text(json.dumps(record, indent=1))
    for name, found in phases["cases"].items():
        print(f"{name}: differing y {found['y']}, S {found['S']}, kept rows {found['kept']}")
    print(f"batched decode ({batched['sequences']} sequences x {batched['steps']} steps): "
          f"{batched['differing']} differing values; float64 error {phases['float64_error']:.2e} of max |y|")
    print(f"sequences in one call ({many['sequences']}, {many['rows']} rows) vs each alone: "
          f"{many['differing']} differing values")
    for name, values in record.get("timing_ms", {}).items():
        print(f"{name}: median {sorted(values)[len(values) // 2]:.4f} ms ({len(values)} samples)")
    failed = (any(v for found in phases["cases"].values() for v in found.values()) or batched["differing"]
              or many["differing"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
