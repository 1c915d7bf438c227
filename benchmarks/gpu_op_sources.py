"""Where a decode step's ops come from: the Python stacks that launched each named op, counted
over a few decode steps of a warmed engine (graphs where the model allows), on CUDA.

    python3 benchmarks/gpu_op_sources.py [--model qwen3-1.7b] [--contract fast] [--batch 128]
        [--prompt-len 150] [--steps 4] [--ops aten::arange,aten::cat] [--capture] [--device cpu]

A profile lists kernels by name, not the line that launched them (the 129 `arange_cuda_out` a
step in gpu_rollout.py's eager "top kernels" at batch 128 were TokenBatch.positions, one per
sequence: found with this, H100, 0674bc4). This prints, for each op in
--ops, its calls per step and the innermost frames of this repository that issued them; with
--capture, those of one graph capture (what every replay then runs).
"""
import argparse
import collections
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import benchmarks.gpu_rollout as gpu_rollout  # noqa: E402
from benchmarks.gpu_rollout import _requests, make_engine, rollout, sync  # noqa: E402
from kernels.contract import load_contract  # noqa: E402
from kernels.models.config import load_model_config  # noqa: E402
from kernels.models.registry import build_model  # noqa: E402

OWN = ("kernels/", "gates/", "harness/", "benchmarks/")  # the profiler names frames by path from sys.path


def own_frames(stack, depth: int = 4) -> tuple:
    """The innermost `depth` frames of the stack that are this repository's files."""
    mine = [frame for frame in stack if frame.startswith(OWN) and "gpu_op_sources" not in frame]
    return tuple(mine[:depth])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen3-1.7b")
    parser.add_argument("--contract", default="fast")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, default=150)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--ops", default="aten::arange,aten::cat")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of this script (eager steps)")
    parser.add_argument("--capture", action="store_true",
                        help="profile one graph capture at --batch instead of the steps (ops inside a replay)")
    args = parser.parse_args()
    gpu_rollout.DEVICE = args.device
    config = load_model_config(args.model)
    weights = {k: v.detach() for k, v in build_model(config, 0).state_dict().items()}
    engine = make_engine(config, load_contract(args.contract), weights, args.batch, args.prompt_len, args.steps + 4)
    rollout(engine, config, args.batch, args.prompt_len, args.steps + 4, seed=3)  # captures, compiles
    for request in _requests(config, args.batch, args.prompt_len, args.steps + 4, seed=9):
        engine.add_request(request)
    engine.step()
    engine.step()  # the prefill, then the first decode step: steady from here
    sync()
    wanted = set(args.ops.split(","))
    verbose = torch._C._profiler._ExperimentalConfig(verbose=True)  # keeps the Python frames of nested calls
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True,
                                experimental_config=verbose) as prof:
        if args.capture:  # the ops a replay runs are those its capture ran (warm-ups: twice more)
            with torch.inference_mode():  # as the engine captures (its Mamba tables are inference tensors)
                engine.graphs._capture(args.batch)
        else:
            for _ in range(args.steps):
                engine.step()
        sync()
    sources = collections.Counter()
    for event in prof.events():
        if event.name in wanted:
            sources[(event.name, own_frames(event.stack))] += 1
    per = 3 if args.capture else args.steps
    print(f"{args.model} {args.contract} batch {args.batch}: calls per "
          f"{'forward of a capture (two warm-ups and the capture)' if args.capture else 'decode step'} by source")
    for (name, frames), count in sources.most_common(20):
        print(f"{count / per:8.1f}  {name}")
        for frame in frames:
            print(f"            {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
