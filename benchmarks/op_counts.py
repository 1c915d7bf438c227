"""Tensor ops issued per region by one engine rollout, consistent vs fast, side by side: where an
eager engine's host time goes when it is host-bound (on a GPU, each op is a kernel launch of
~8-20 us on the host: benchmarks/gpu_host_overhead.py; view ops that launch nothing are not
counted). Runs anywhere; on the CPU the linear regions count torch ops where CUDA runs one
Triton kernel, the other regions run the same Python on both.

  python benchmarks/op_counts.py --model nemotron [--sequences 16] [--new-tokens 8] --out DIR

Counts come from a TorchDispatchMode under the region door (RegionDispatch.__call__), per
(region, case); raw counts, the workload and the commit go to DIR/op_counts-<time>.json.
"""
import argparse
import sys
from collections import Counter
from pathlib import Path

from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.raw_output import provenance, write_raw  # noqa: E402
from gates.workload import EngineShape, Workload, rollout, seeded_weights  # noqa: E402
from kernels.contract import dispatch as region_door  # noqa: E402
from kernels.contract import load_contract  # noqa: E402
from kernels.models.config import load_model_config  # noqa: E402
from kernels.models.registry import config_name  # noqa: E402

VIEWS = {"view", "_unsafe_view", "t", "transpose", "slice", "select", "expand", "as_strided", "split",
         "split_with_sizes", "unsqueeze", "squeeze", "alias", "detach", "permute", "unbind", "_reshape_alias",
         "reshape", "lift_fresh", "unflatten", "narrow"}


class OpCounter(TorchDispatchMode):
    """Counts every non-view aten op under the region being run (or 'engine' outside one)."""

    def __init__(self):
        super().__init__()
        self.region, self.counts = ("engine", "-"), Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ not in VIEWS:
            self.counts[self.region] += 1
        return func(*args, **(kwargs or {}))


def count(model: str, contract_name: str, workload: Workload, shape: EngineShape) -> Counter:
    config = load_model_config(config_name(model, "cut"))
    weights, counter = seeded_weights(config), OpCounter()
    door = region_door.RegionDispatch.__call__

    def counted(self, region, case, layer, *args, **kwargs):
        outer, counter.region = counter.region, (region, case)
        try:
            return door(self, region, case, layer, *args, **kwargs)
        finally:
            counter.region = outer

    region_door.RegionDispatch.__call__ = counted
    try:
        with counter:
            rollout(config, load_contract(contract_name), weights, workload, shape)
    finally:
        region_door.RegionDispatch.__call__ = door
    return counter.counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="nemotron")
    parser.add_argument("--sequences", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    workload = Workload(num_sequences=args.sequences, new_tokens=args.new_tokens, arrival_spread=4, seed=1)
    shape = EngineShape(tokens_per_step=4096, max_running=args.sequences)
    counts = {name: count(args.model, name, workload, shape) for name in ("consistent", "fast")}
    write_raw({**provenance(), "model": args.model, "workload": vars(args),
               "counts": {name: [[*key, n] for key, n in c.items()] for name, c in counts.items()}},
              args.out, "op_counts")
    regions = sorted({key[0] for c in counts.values() for key in c})
    per_region = {name: Counter() for name in counts}
    for name, c in counts.items():
        for (region, _), n in c.items():
            per_region[name][region] += n
    print(f"ops per rollout ({args.model} cut, {args.sequences} sequences x {args.new_tokens} tokens)")
    print(f"{'region':<16}{'consistent':>12}{'fast':>10}")
    for region in sorted(regions, key=lambda r: -per_region["consistent"][r]):
        print(f"{region:<16}{per_region['consistent'][region]:>12}{per_region['fast'][region]:>10}")
    print(f"{'total':<16}{sum(per_region['consistent'].values()):>12}{sum(per_region['fast'].values()):>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
