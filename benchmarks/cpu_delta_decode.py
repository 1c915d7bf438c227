"""A Gated DeltaNet decode step on the CPU, side by side: one call per sequence (consistent) and
every sequence's chunk re-played in one batched call on the engine's slot pools (decode_pooled).

    python3 benchmarks/cpu_delta_decode.py [--out DIR] [--sequences 64] [--repeats 20]

The qwen3_5 cut's shape (4 value heads over 2 key heads of 16, chunk 16); each sequence holds a
different number of rows, so its new row falls at every place in its chunk (completing it too).
Per repeat each way runs once, in rotating order; the outputs are compared bit for bit first (a
mismatch exits 1). Printed: medians and each / one-by-one; raw samples with the commit first.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.raw_output import provenance, write_raw  # noqa: E402
from kernels.models.batch import Segment  # noqa: E402
from kernels.models.mamba_pool import delta_store  # noqa: E402
from kernels.ops.gated_delta.consistent import consistent, decode_pooled  # noqa: E402
from kernels.ops.gated_delta.forms import DeltaState  # noqa: E402

KEY_HEADS, HEADS, DIM, CHUNK = 2, 4, 16, 16


def _rows(count, generator):
    q, k = (torch.randn(count, KEY_HEADS, DIM, generator=generator) for _ in range(2))
    return (q, k, torch.randn(count, HEADS, DIM, generator=generator), -torch.rand(count, HEADS, generator=generator),
            torch.rand(count, HEADS, generator=generator))


def _pooled(states):
    """The states in an engine's pooled store, and one decode segment per sequence."""
    store = delta_store(conv_rows=3, conv_dim=8, num_heads=HEADS, key_dim=DIM, value_dim=DIM, dtype=torch.float32,
                        chunk_size=CHUNK, pooled=True)
    segments = []
    for seq, state in enumerate(states):
        held = store.open(Segment(seq_id=seq, start=0, length=1, row=seq, case="engine_decode"))
        held.ssm, held.pending, held.folded = state.ssm, state.pending, state.folded
        position = state.folded + (0 if state.pending is None else state.pending[0].shape[0])
        segments.append(Segment(seq_id=seq, start=position, length=1, row=seq, case="engine_decode"))
    return store, segments


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/cpu/delta-decode")
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    states = [consistent(*_rows(1 + i % (3 * CHUNK), generator), DeltaState.empty(HEADS, DIM, DIM),
                         chunk_size=CHUNK)[1] for i in range(args.sequences)]
    new = _rows(args.sequences, generator)

    store, segments = _pooled(states)

    ways = {"one_by_one": lambda: torch.cat([consistent(*(t[i:i + 1] for t in new), s, chunk_size=CHUNK)[0]
                                             for i, s in enumerate(states)]),
            "pooled": lambda: decode_pooled(*new, segments, store, chunk_size=CHUNK)}
    outputs = {name: way() for name, way in ways.items()}  # the pools' S moves after this: timing only
    if any(not torch.equal(y.view(torch.int32), outputs["one_by_one"].view(torch.int32)) for y in outputs.values()):
        print("the pooled step's outputs are not the one-by-one bits")
        return 1
    samples = {name: [] for name in ways}
    for repeat in range(args.repeats):
        order = list(ways)[repeat % len(ways):] + list(ways)[:repeat % len(ways)]
        for name in order:
            start = time.perf_counter()
            ways[name]()
            samples[name].append(time.perf_counter() - start)
    write_raw({**provenance(), "args": vars(args), "threads": torch.get_num_threads(), "samples_s": samples},
              args.out, "delta-decode")
    medians = {name: statistics.median(values) * 1e3 for name, values in samples.items()}
    print(f"{args.sequences} sequences, outputs bit-equal; median ms (/ one by one): "
          + ", ".join(f"{name} {ms:.2f} ({ms / medians['one_by_one']:.2f})" for name, ms in medians.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
