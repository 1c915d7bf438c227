"""Checkpoint save and exact resume: model weights, fp32 master weights, optimizer state,
RNG state and the run's position (step, next prompt index).

Written to a temporary folder and renamed into place, so a crash never leaves half a
checkpoint under the final name; `manifest.json` records the SHA-256 of every file and
loading refuses a checkpoint whose files do not match it.
"""
import hashlib
import io
import json
import os
import pickle
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

MANIFEST = "manifest.json"
FILES = ("master.safetensors", "model.safetensors", "optimizer.pt", "run_state.json")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from, with the path and the reason."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def save_checkpoint(directory, *, model_state, master_state, optimizer_state, run_state) -> Path:
    """Write a checkpoint; `run_state` is JSON-able (step, data position, names)."""
    directory = Path(directory)
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in model_state.items()}, staging / "model.safetensors")
    save_file({k: v.detach().cpu().contiguous() for k, v in master_state.items()}, staging / "master.safetensors")
    buffer = io.BytesIO()
    torch.save({"optimizer": optimizer_state, "torch_rng": torch.get_rng_state()}, buffer)
    (staging / "optimizer.pt").write_bytes(buffer.getvalue())
    (staging / "run_state.json").write_text(json.dumps(run_state, indent=2, sort_keys=True))
    files = {p.name: _sha256(p) for p in sorted(staging.iterdir())}
    (staging / MANIFEST).write_text(json.dumps({"files": files}, indent=2, sort_keys=True))
    # Swap in two renames: a crash leaves either the old or the new checkpoint under a
    # name that load_checkpoint accepts, never neither.
    retired = directory.with_name(directory.name + ".old")
    shutil.rmtree(retired, ignore_errors=True)
    if directory.exists():
        os.replace(directory, retired)
    os.replace(staging, directory)
    shutil.rmtree(retired, ignore_errors=True)
    return directory


def load_checkpoint(directory) -> dict:
    """{model_state, master_state, optimizer_state, torch_rng, run_state}; CheckpointError if
    anything is missing, altered or unreadable."""
    directory = Path(directory)
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(f"{directory}: not a checkpoint (no {MANIFEST})")
    try:
        expected = json.loads(manifest_path.read_text())["files"]
        if not isinstance(expected, dict) or sorted(expected) != sorted(FILES):
            raise ValueError(f"expected entries for {list(FILES)}")
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{manifest_path}: unreadable manifest: {error}") from error
    for name, digest in expected.items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"{directory}: missing {name}")
        if _sha256(path) != digest:
            raise CheckpointError(f"{path}: content does not match the manifest (corrupt or edited)")
    try:
        extra = torch.load(directory / "optimizer.pt", weights_only=True)
        return {
            "model_state": load_file(directory / "model.safetensors"),
            "master_state": load_file(directory / "master.safetensors"),
            "optimizer_state": extra["optimizer"],
            "torch_rng": extra["torch_rng"],
            "run_state": json.loads((directory / "run_state.json").read_text()),
        }
    except (SafetensorError, OSError, RuntimeError, ValueError, KeyError, pickle.UnpicklingError) as error:
        raise CheckpointError(f"{directory}: unreadable checkpoint: {error}") from error
