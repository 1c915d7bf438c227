"""The device the gates run the code under test on: `--device cpu|cuda` (gates/conftest.py),
cpu by default. Models, engines, trainers and op inputs are placed there; references stay
on the CPU in float64.

On CUDA the gates run with cuBLAS's fixed workspace (CUBLAS_WORKSPACE_CONFIG), which
torch.use_deterministic_algorithms requires for cuBLAS calls (C01 turns it on); it must be
set before CUDA starts, so select() sets it.
"""
import os

import torch

DEVICES = ("cpu", "cuda")
_selected = "cpu"


def select(name: str) -> None:
    """Choose the device; ValueError if unknown or not present on this machine."""
    global _selected
    if name not in DEVICES:
        raise ValueError(f"--device: {name!r} is not one of {DEVICES}")
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA device on this machine")
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    _selected = name


def target() -> str:
    """The selected device's name."""
    return _selected


def place(tensor):
    """The tensor on the selected device."""
    return tensor.to(_selected)
