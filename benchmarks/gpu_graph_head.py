"""The decode graph's head on CUDA (kernels/engine/graph_head.py): the draw and the sampled
token's log-prob from a step's logits, as captured now against the form before 2840dcb
(the logits scaled twice, greedy rows by a separate torch argmax), bits and time side by side.

    python3 benchmarks/gpu_graph_head.py --out DIR [--batches 1,8,64,128,256] [--vocab 151936]

For each contract's sampler and log-prob variants and each batch: bf16 logits, half the rows
greedy with a tie for their maximum planted in a later chunk, the others at temperatures in
(0.5, 1.5). Both heads must give the same tokens and the same log-prob bits (int views); the
greedy rows must be torch.argmax's tokens. Times are medians of CUDA-graph replays of each
head (do_bench), raw samples saved with the commit and the environment. Then the scaling
alone, three ways that must give the same bits: `logits / T` (torch's mixed-dtype path),
`.float().div_(T)` and one Triton pass with an IEEE division (kernels/ops/logprob/triton.py,
what `scaled` runs on CUDA since it measured fastest). Exit 1 on a mismatch.
"""
import argparse
import sys
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import kernels.ops.logprob.triton as logprob_triton  # noqa: E402
from benchmarks.raw_output import provenance, write_raw  # noqa: E402
from kernels.ops.logprob.consistent import consistent as logprob_consistent  # noqa: E402
from kernels.ops.logprob.fast import fast_log_softmax  # noqa: E402
from kernels.ops.logprob.forms import scaled  # noqa: E402
from kernels.ops.sampler.consistent import consistent_draw  # noqa: E402
from kernels.ops.sampler.fast import fast_draw  # noqa: E402
from kernels.ops.sampler.forms import mix_seed  # noqa: E402

CONTRACTS = {"consistent": (consistent_draw, logprob_consistent), "fast": (fast_draw, fast_log_softmax)}


def before(draw, logprob_of, logits, temperatures, greedy, keys):
    """The head before 2840dcb: scaled for the draw, argmax for greedy rows, scaled again."""
    x = logits.float() / temperatures[:, None]
    tokens = torch.where(greedy, x.argmax(dim=-1), draw(x, torch.zeros_like(greedy), keys))
    return tokens, logprob_of(logits, tokens, temperatures)


def now(draw, logprob_of, logits, temperatures, greedy, keys):
    """The captured head as kernels/engine/graph_head.py runs it."""
    x = scaled(logits, temperatures)
    tokens = draw(x, greedy, keys)
    return tokens, logprob_of(x, tokens, None)


SCALINGS = {"mixed_div": lambda logits, t: logits / t[:, None],
            "float_div_": lambda logits, t: logits.float().div_(t[:, None]),
            "triton_div_rn": logprob_triton.scale_rows}


def time_scalings(results, failures, batches, vocab) -> None:
    """The scaling alone, each way: median us and whether its bits are the mixed division's."""
    print(f"{'scaling':<15}" + "".join(f"{'b' + str(b):>9}" for b in batches) + "  bits")
    rows = {name: [] for name in SCALINGS}
    for batch in batches:
        logits, temperatures, _, _ = inputs(batch, vocab, seed=batch)
        reference = SCALINGS["mixed_div"](logits, temperatures)
        for name, scale in SCALINGS.items():
            same = bool(torch.equal(scale(logits, temperatures).view(torch.int32), reference.view(torch.int32)))
            samples = do_bench(lambda: scale(logits, temperatures), return_mode="all")
            rows[name].append({"batch": batch, "same": same, "median_us": 1000 * sorted(samples)[len(samples) // 2],
                               "samples_ms": samples})
            failures += [] if same else [f"scaling {name} b{batch}"]
    for name, cells in rows.items():
        print(f"{name:<15}" + "".join(f"{c['median_us']:>9.1f}" for c in cells)
              + f"  {'same' if all(c['same'] for c in cells) else 'DIFFER'}")
    results["scalings"] = rows


def inputs(batch: int, vocab: int, seed: int):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    logits = (4 * torch.randn(batch, vocab, device="cuda", generator=generator)).to(torch.bfloat16)
    greedy = torch.arange(batch, device="cuda") % 2 == 0
    for row in range(0, batch, 2):  # a tie for the maximum, 5000 tokens on (another chunk)
        best = int(logits[row].argmax())
        logits[row, (best + 5000) % vocab] = logits[row, best]
    temperatures = torch.where(greedy, 1.0, 0.5 + torch.rand(batch, device="cuda", generator=generator))
    keys = torch.tensor([mix_seed(seed, row) for row in range(batch)], dtype=torch.int64, device="cuda")
    return logits, temperatures, greedy, keys


def graphed(fn, *args):
    """fn(*args) captured once; returns (replay, outputs)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = fn(*args)
    return graph.replay, outputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--batches", default="1,8,64,128,256")
    parser.add_argument("--vocab", type=int, default=151936)
    args = parser.parse_args()
    results, failures = {**provenance(), "args": vars(args), "cells": []}, []
    print(f"{'contract':<11}{'batch':>6}{'before us':>11}{'now us':>9}{'ratio':>7}  bits")
    for name, (draw, logprob_of) in CONTRACTS.items():
        for batch in map(int, args.batches.split(",")):
            data = inputs(batch, args.vocab, seed=batch)
            old_replay, old = graphed(before, draw, logprob_of, *data)
            new_replay, new = graphed(now, draw, logprob_of, *data)
            old_replay(), new_replay()
            torch.cuda.synchronize()
            greedy = data[2]
            same = {"tokens": bool(torch.equal(old[0], new[0])),
                    "logprobs": bool(torch.equal(old[1].view(torch.int32), new[1].view(torch.int32))),
                    "greedy_is_argmax": bool(torch.equal(new[0][greedy], data[0][greedy].argmax(dim=-1)))}
            samples = {"before": do_bench(old_replay, return_mode="all"),
                       "now": do_bench(new_replay, return_mode="all")}
            medians = {k: 1000 * sorted(v)[len(v) // 2] for k, v in samples.items()}
            results["cells"].append({"contract": name, "batch": batch, "same": same, "median_us": medians,
                                     "samples_ms": samples})
            failures += [f"{name} b{batch} {k}" for k, ok in same.items() if not ok]
            print(f"{name:<11}{batch:>6}{medians['before']:>11.1f}{medians['now']:>9.1f}"
                  f"{medians['now'] / medians['before']:>7.2f}  {'same' if all(same.values()) else same}")
    time_scalings(results, failures, list(map(int, args.batches.split(","))), args.vocab)
    print("wrote", write_raw(results, args.out, "gpu_graph_head"))
    if failures:
        print("MISMATCH:", ", ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
