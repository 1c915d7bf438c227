"""Writes a GEMM launch table (kernels/ops/gemm_tuning.py format) that switches load path and
tile at every M bucket for every weight shape of the named models: pointer loads for M <= 16,
TMA tiles to 64, a persistent grid to 256, TMA tiles above. The device gates run the
consistent contract under it (benchmarks/gpu_gates.sh), so C2's batches of 2..128 rows and
C3's prefill/decode phases cross kernels inside one model: what the speed table may do, the
gates then prove moves no bit. (The cuts' shapes are not in the tuned table, which only holds
full-width shapes.)

  python benchmarks/gemm_mixed_table.py --models qwen3-cut,nemotron-cut --out FILE
"""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kernels.models.config import load_model_config  # noqa: E402
from kernels.models.registry import build_model  # noqa: E402

MIXED = [[16, "pointer", [16, 32, 4, 4], 128], [64, "tma", [64, 32, 4, 4], 128],
         [256, "persistent", [128, 128, 4, 4], 64], [None, "tma", [128, 128, 8, 4], 64]]


def weight_shapes(config_name: str) -> set:
    with torch.device("meta"):
        model = build_model(load_model_config(config_name), seed=None)
    return {tuple(p.shape) for p in model.parameters() if p.dim() == 2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="qwen3-cut,nemotron-cut", help="config names, comma-separated")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    shapes = set().union(*(weight_shapes(name) for name in args.models.split(",")))
    document = {"device": "any", "source": "benchmarks/gemm_mixed_table.py (every path at every shape)",
                "shapes": {f"{n}x{k}": MIXED for n, k in sorted(shapes)}}
    Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {args.out}: {len(shapes)} shapes")


if __name__ == "__main__":
    main()
