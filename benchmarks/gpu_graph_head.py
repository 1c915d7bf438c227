"""The decode graph's head on CUDA (kernels/engine/graph_head.py): the draw and the sampled
token's log-prob from a step's logits, as captured now (each reads the bf16 logits as they come:
the draw scales in its kernel, the log-prob is kernels/ops/logprob/rows_triton.py) against the
head before it (one scaled fp32 copy, then the draw and the log-prob's torch form over it), side
by side.

    python3 benchmarks/gpu_graph_head.py --out DIR [--batches 1,8,64,128,256] [--vocab 151936]

For each contract's sampler and log-prob variants and each batch: bf16 logits, half the rows
greedy with a tie for their maximum planted in a later chunk, the others at temperatures in
(0.5, 1.5). Bits: both heads draw the same tokens; greedy rows take torch.argmax's; the consistent
log-prob is the same bits alone (each row in its own launch) as in the batch, and the trainer's
autograd form gives the engine's bits. Values: the new log-probs against the old within 1e-5
relative (printed). Times are medians of CUDA-graph replays (do_bench), raw samples saved with
the commit and the environment. Exit 1 on a mismatch.
"""
import argparse
import sys
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.raw_output import provenance, write_raw  # noqa: E402
from kernels.ops.logprob.consistent import consistent as logprob_consistent  # noqa: E402
from kernels.ops.logprob.fast import fast_log_softmax  # noqa: E402
from kernels.ops.logprob.forms import scaled  # noqa: E402
from kernels.ops.reduction import row_sum  # noqa: E402
from kernels.ops.sampler.consistent import consistent_draw  # noqa: E402
from kernels.ops.sampler.fast import fast_draw  # noqa: E402
from kernels.ops.sampler.forms import mix_seed  # noqa: E402


def _torch_consistent(x, tokens):
    row_max = x.amax(dim=-1, keepdim=True)
    return (x.gather(-1, tokens[:, None]) - (row_max + torch.log(row_sum(torch.exp(x - row_max)))))[:, 0]


def _torch_fast(x, tokens):
    return torch.log_softmax(x, dim=-1).gather(-1, tokens[:, None])[:, 0]


CONTRACTS = {"consistent": (consistent_draw, logprob_consistent, _torch_consistent),
             "fast": (fast_draw, fast_log_softmax, _torch_fast)}


def before(draw, logprob_of, torch_form, logits, temperatures, greedy, keys):
    """The head before the fused log-prob: one scaled copy, the draw and the torch form over it."""
    x = scaled(logits, temperatures)
    tokens = draw(x, greedy, keys)
    return tokens, torch_form(x, tokens)


def now(draw, logprob_of, torch_form, logits, temperatures, greedy, keys):
    """The captured head as kernels/engine/graph_head.py runs it."""
    tokens = draw(logits, greedy, keys, temperatures)
    return tokens, logprob_of(logits, tokens, temperatures)


def consistent_bits(logits, temperatures, tokens, logprobs) -> dict:
    """The consistent log-prob alone per row and through the trainer's autograd form."""
    alone = torch.cat([logprob_consistent(logits[i:i + 1], tokens[i:i + 1], temperatures[i:i + 1])
                       for i in range(logits.shape[0])])
    leaf = logits.detach().clone().requires_grad_()
    trainer = logprob_consistent(leaf, tokens, temperatures).detach()
    return {"rows_alone": bool(torch.equal(alone.view(torch.int32), logprobs.view(torch.int32))),
            "trainer_form": bool(torch.equal(trainer.view(torch.int32), logprobs.view(torch.int32)))}


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
    print(f"{'contract':<11}{'batch':>6}{'before us':>11}{'now us':>9}{'ratio':>7}{'max rel':>10}  bits")
    for name, forms in CONTRACTS.items():
        for batch in map(int, args.batches.split(",")):
            data = inputs(batch, args.vocab, seed=batch)
            old_replay, old = graphed(before, *forms, *data)
            new_replay, new = graphed(now, *forms, *data)
            old_replay(), new_replay()
            torch.cuda.synchronize()
            logits, temperatures, greedy, _ = data
            same = {"tokens": bool(torch.equal(old[0], new[0])),
                    "greedy_is_argmax": bool(torch.equal(new[0][greedy], logits[greedy].argmax(dim=-1)))}
            if name == "consistent":
                same.update(consistent_bits(logits, temperatures, new[0], new[1]))
            relative = float(((new[1].double() - old[1].double()).abs() / old[1].double().abs().clamp_min(1)).max())
            same["values_within_1e-5"] = relative <= 1e-5
            samples = {"before": do_bench(old_replay, return_mode="all"),
                       "now": do_bench(new_replay, return_mode="all")}
            medians = {k: 1000 * sorted(v)[len(v) // 2] for k, v in samples.items()}
            results["cells"].append({"contract": name, "batch": batch, "same": same, "max_relative": relative,
                                     "median_us": medians, "samples_ms": samples})
            failures += [f"{name} b{batch} {k}" for k, ok in same.items() if not ok]
            print(f"{name:<11}{batch:>6}{medians['before']:>11.1f}{medians['now']:>9.1f}"
                  f"{medians['now'] / medians['before']:>7.2f}{relative:>10.1e}  "
                  f"{'same' if all(same.values()) else same}")
    print("wrote", write_raw(results, args.out, "gpu_graph_head"))
    if failures:
        print("MISMATCH:", ", ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
