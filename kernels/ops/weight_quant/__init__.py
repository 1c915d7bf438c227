"""Quantized-checkpoint weights as the model meets them: w as the checkpoint format (none / fp8 /
nvfp4) stores it, dequantized, behind a straight-through estimator (the gradient reaches the bf16
master weight as if unquantized), so the GEMM regions after it stay as they are.

The format is model semantics; one round trip serves every case of both contracts (consistent.py).
Reference: gates/reference/quant.py.
"""
from kernels.ops.weight_quant import consistent

VARIANTS = {"round_trip": consistent.weight_round_trip}
CALL_KEYWORDS = {"fmt"}
