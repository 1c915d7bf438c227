"""Quantization as the model meets it: quantized-checkpoint weights and W8A8 FP8 activations.

Each is a quantize-dequantize round trip behind a straight-through estimator (the gradient reaches
the bf16 master weight as if unquantized), so the GEMM regions after it stay as they are. The
format (none / fp8 / nvfp4) is model semantics; the contract picks the arithmetic: weights one round
trip in every case, activations scaled per token (1x128) when consistent, per tensor when fast (a
token's bits then follow the batch). Reference: gates/reference/quant.py.
"""
from functools import partial

import torch

from kernels.ops.quant import fp8_round_trip, nvfp4_round_trip, saturating_e4m3, ste

WEIGHT_FORMATS = {"fp8": partial(fp8_round_trip, granularity="block_128x128"), "nvfp4": nvfp4_round_trip}


def weight_round_trip(w, *, fmt):
    """w as the checkpoint format stores it (dequantized), gradient straight through."""
    if fmt == "none":
        return w
    if fmt not in WEIGHT_FORMATS:
        raise ValueError(f"weight format {fmt!r} is not one of {['none', *WEIGHT_FORMATS]}")
    return ste(w, WEIGHT_FORMATS[fmt])


def activation_fast(x, *, fmt):
    """FP8 with one scale for the whole batch (batch-variant)."""
    return x if fmt == "none" else ste(x, partial(fp8_round_trip, granularity="tensor"))


def activation_consistent(x, *, fmt):
    """FP8 with a scale per token and 128-column block (batch invariant)."""
    return x if fmt == "none" else ste(x, partial(fp8_round_trip, granularity="block_1x128"))


KV_FORMATS = ("auto", "fp8")


def kv_encode(x, kv_format: str):
    """What a KV store keeps: the activation itself, or FP8 E4M3 with a static scale of 1
    (as engines run an uncalibrated FP8 KV cache), clamped before the cast."""
    return saturating_e4m3(x.float()) if kv_format == "fp8" else x


def kv_decode(stored, dtype):
    """What attention reads back from a store: the one read path of every case."""
    return stored.to(torch.float32).to(dtype) if stored.dtype == torch.float8_e4m3fn else stored


def kv_round_trip(x, kv_format: str):
    """decode(encode(x)) with the gradient straight through (the trainer's transient store)."""
    if kv_format == "auto":
        return x
    return ste(x, lambda t: kv_decode(kv_encode(t, kv_format), t.dtype))
