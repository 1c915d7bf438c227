"""Rotary position embedding, rotate-half form (Qwen3): x' = x*cos(p*f) + rot(x)*sin(p*f).

f_i = theta^(-2i/D). Consistency: the cos/sin table is computed once per (theta, D, max_position)
in float64 over every position, rounded to fp32 and *indexed* by position, so a token's angle never
depends on the other positions in the call; the rotation runs in fp32, rounded once.
Reference: gates/reference/rope.py.
"""
from kernels.ops.rope import consistent, fast

VARIANTS = {"fast": fast.fast, "consistent": consistent.consistent}
CALL_KEYWORDS = {"theta", "max_position"}
