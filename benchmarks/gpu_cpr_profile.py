"""Where a CPR stage's time goes: one DeltaNet layer's trainer fwd+bwd (the CPR table's shape, its
Layer and inputs: benchmarks/gpu_cpr_table.py) under torch.profiler, per variant, the kernels that
took the most GPU time and the host's total, printed and saved.

    python3 benchmarks/gpu_cpr_profile.py --out DIR [--variants fast_chunked,consistent] [--rows 14]
"""
import argparse
import sys
import types
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import gpu_cpr_table as table  # noqa: E402
from kernels.models.config import load_model_config  # noqa: E402


def profiled_trainer_step(layer, name, shape) -> str:
    """The table of one profiled fwd+bwd of variant `name`, after two warm-up steps."""
    for _ in range(2):
        table.time_stage(layer, name, "trainer", shape)
    rows = [t.requires_grad_() for t in layer.rows(shape.sequences * shape.train_tokens)]
    segments = table._segments(shape.sequences, shape.train_tokens, 0, "trainer_fwd")
    store = layer.store(pooled=False)
    weights = torch.randn(rows[2].shape, device=layer.device, dtype=layer.dtype)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        out = layer.call(name, rows, segments, store)
        torch.cuda.synchronize()
        with record_function("BACKWARD"):
            (out.float() * weights).sum().backward()
            torch.cuda.synchronize()
    return trace.key_averages().table(sort_by="cuda_time_total", row_limit=shape.rows, max_name_column_width=50)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--config", default="qwen3_5-wide-cut")
    parser.add_argument("--variants", default="fast_chunked,consistent")
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--train-tokens", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=14)
    args = parser.parse_args()
    shape = types.SimpleNamespace(sequences=args.sequences, train_tokens=args.train_tokens, rows=args.rows)
    layer = table.Layer(load_model_config(args.config), torch.device("cuda"), torch.bfloat16)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.variants.split(","):
        text = profiled_trainer_step(layer, name, shape)
        (out / f"cpr-profile-trainer-{name}.txt").write_text(text)
        print(f"===== {name}\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
