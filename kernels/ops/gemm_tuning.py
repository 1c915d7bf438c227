"""Tuned launch tables for the consistent GEMM: kernels/ops/tuned/gemm-<device>.json per device.

A table maps a weight shape (N, K) ("shapes"; optional "default" rows for others) to M buckets,
rows [largest M or null, kernel, [BLOCK_M, BLOCK_N, warps, stages], BLOCK_K], each the variant that
won a benchmarks/gpu_gemm.py sweep (benchmarks/gemm_tune.py keeps only variants whose bits equal
the reference at every M): the variant may follow M without moving a bit, so a table is a speed
choice only. BITWISE_GEMM_TUNING names another file; a malformed one is an error naming it.
"""
import functools
import json
import os
import re
from pathlib import Path

import torch

KERNELS = ("pointer", "tma", "persistent")  # kernels/ops/linear/triton.py's load paths
DEFAULT = "default"  # load()'s key for the rows of shapes the table does not list
TUNED_DIR = Path(__file__).resolve().parent / "tuned"
ENV = "BITWISE_GEMM_TUNING"


def path_for(device_name: str) -> Path:
    return TUNED_DIR / f"gemm-{re.sub(r'[^a-z0-9]+', '-', device_name.lower()).strip('-')}.json"


def _row(path, key, row) -> tuple:
    try:
        largest, kernel, config, block_k = row
        config = tuple(int(v) for v in config)
        valid = (largest is None or int(largest) > 0) and kernel in KERNELS and len(config) == 4 and int(block_k) > 0
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise ValueError(f"{path}: shape {key}: malformed row {row!r}: expected "
                         f"[largest M or null, one of {KERNELS}, [BLOCK_M, BLOCK_N, warps, stages], BLOCK_K]")
    return (None if largest is None else int(largest), kernel, config, int(block_k))


def _rows(path, key, rows) -> tuple:
    if not rows:
        raise ValueError(f"{path}: {key} has no rows")
    parsed = tuple(_row(path, key, row) for row in rows)
    bounds = [row[0] for row in parsed]
    if bounds[-1] is not None or None in bounds[:-1] or bounds[:-1] != sorted(set(bounds[:-1])):
        raise ValueError(f"{path}: shape {key}: buckets must rise and end with one open (null) bucket")
    return parsed


def load(path: Path) -> dict:
    """{(N, K): ((largest M, kernel, config, block_k), ...)} from a table file, and under the
    key DEFAULT the rows for other shapes when the file has them."""
    try:
        document = json.loads(Path(path).read_text())
        shapes = document["shapes"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"GEMM tuning table {path} is unreadable: {error}") from error
    table = {}
    for key, rows in shapes.items():
        if not re.fullmatch(r"\d+x\d+", key):
            raise ValueError(f"{path}: shape key {key!r} must be 'NxK'")
        n, k = map(int, key.split("x"))
        table[(n, k)] = _rows(path, key, rows)
    if "default" in document:
        table[DEFAULT] = _rows(path, "default", document["default"])
    return table


def table_for(device) -> dict:
    """The tuned table for this tensor device ({} on a CPU device, or a device with no file).
    Resolved once per (override, device): this runs on every GEMM call."""
    index = device.index
    if index is None and device.type == "cuda":
        index = torch.cuda.current_device()
    return _resolved(os.environ.get(ENV) or None, device.type, index)


@functools.lru_cache(maxsize=None)
def _resolved(override, device_type: str, index) -> dict:
    if override:
        if not Path(override).exists():
            raise ValueError(f"{ENV}={override}: no such file")
        return load(Path(override))
    if device_type != "cuda":
        return {}
    path = path_for(torch.cuda.get_device_name(index))
    return load(path) if path.exists() else {}
