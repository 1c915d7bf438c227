"""Rotary position embedding, interleaved pairs on the trailing `rope_dim` channels (DeepSeek-V4):
for pairs (x_2i, x_2i+1) of the last rope_dim channels, x' = (x_2i c - x_2i+1 s, x_2i+1 c + x_2i s)
with c, s = cos, sin(p f_i), f_i = theta^(-2i/rope_dim); the leading channels pass unchanged.
`inverse` rotates by -p (DeepSeek-V4 undoes the value's rotation on the attention output).
Consistency: as rope's, cos/sin from one float64 table per (theta, rope_dim, max_position), rounded
to fp32 and indexed by absolute position; the rotation in fp32, rounded once. Fast: angles per call
in fp32, cos/sin and the rotation in the activation dtype. Reference: gates/reference/rope.py.
"""
from kernels.ops.rope_interleaved import consistent, fast

VARIANTS = {"fast": fast.fast, "consistent": consistent.consistent}
CALL_KEYWORDS = {"theta", "max_position", "rope_dim", "inverse"}
