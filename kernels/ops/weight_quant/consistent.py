"""weight_quant.round_trip, the one variant both contracts name: the checkpoint format's
quantize-dequantize round trip of a weight (elementwise and per weight tensor, so batch and
phase invariant as it stands), gradient straight through."""
from functools import partial

from kernels.ops.quant import fp8_round_trip, nvfp4_round_trip, ste

WEIGHT_FORMATS = {"fp8": partial(fp8_round_trip, granularity="block_128x128"), "nvfp4": nvfp4_round_trip}


def weight_round_trip(w, *, fmt):
    """w as the checkpoint format stores it (dequantized), gradient straight through."""
    if fmt == "none":
        return w
    if fmt not in WEIGHT_FORMATS:
        raise ValueError(f"weight format {fmt!r} is not one of {['none', *WEIGHT_FORMATS]}")
    return ste(w, WEIGHT_FORMATS[fmt])
