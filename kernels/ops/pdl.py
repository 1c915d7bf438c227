"""Programmatic dependent launch (PDL, Hopper and later) for the decode step's Triton kernels.

A kernel launched with PDL may be scheduled while the kernel before it on the stream drains (once
every block of that one has started); it waits (griddepcontrol.wait: the earlier grid complete,
its writes visible) before its first load. Every value it reads is then the one a serialized
launch reads: no arithmetic changes and no bit moves; only the gap between kernels can shrink.
A kernel launched with it must begin with `wait_for_inputs(PDL)`: such kernels take PDL as a
constexpr and their launches pass `**launch_options(device)`; every other kernel launches as before
(tests/ops/triton/test_pdl.py holds the source to that rule). Off unless BITWISE_PDL=1, read at
each launch, so a benchmark builds engines of either kind (benchmarks/gpu_pdl.py).
"""
import functools
import os

import torch
import triton
import triton.language as tl


@functools.lru_cache(maxsize=None)
def _capable(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


ENV = "BITWISE_PDL"


def enabled(device) -> bool:
    """BITWISE_PDL=1 and a CUDA device of compute capability 9 or more; a value other than 0 or 1
    is an error naming the switch."""
    asked = os.environ.get(ENV) or "0"
    if asked not in ("0", "1"):
        raise ValueError(f"{ENV}={asked!r}: 0 or 1 (programmatic dependent launch off or on)")
    if asked == "0":  # the default: an eager launch pays no device lookup for it
        return False
    device = torch.device(device)
    return device.type == "cuda" and _capable(device.index if device.index is not None
                                              else torch.cuda.current_device())


def launch_options(device) -> dict:
    """The kernel's PDL constexpr and Triton's launch_pdl option, on or off together."""
    on = enabled(device)
    return {"PDL": on, "launch_pdl": on}


@triton.jit
def wait_for_inputs(PDL: tl.constexpr):
    """First statement of a kernel that may be launched with PDL: wait for the grid before, then
    let the next one launch. Its blocks start once every block of this grid has passed here, so
    they never take a slot a later wave of this grid needs, and they wait in turn."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
