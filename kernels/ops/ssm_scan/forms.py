"""The SSD scan's chunked form in torch ops (the math: kernels/ops/ssm_scan/__init__.py): one
chunk's outputs and end state, and a run of chunks from a state, and the rows a call scans (the
buffered ones, then the new). The CPU paths (consistent.py, fast.py) and the CUDA backward's
recompute (kernels/ops/ssm_scan/triton.py) run it, so none imports another.
"""
import torch

from kernels.ops import chunk_scan


def chunk(x, B, C, dt, state0, A, D):
    """One chunk of Q rows: (y [Q, H, P] fp32, state after the chunk [H, P, N]); with a
    leading sequence dim on every argument, each sequence's chunk in the same ops."""
    y, fold = chunk_outputs(x, B, C, dt, state0, A, D)
    return y, end_state(*fold, state0)


def chunk_outputs(x, B, C, dt, state0, A, D):
    """(y [Q, H, P] fp32, what _end_state folds the chunk from): chunk without its state. The
    head-major rows are made contiguous, so every GEMM operand is contiguous or the transpose of
    a contiguous tensor and the BLAS sees one layout per entry, one chunk or a batch of them
    (as gated_delta/forms.py's chunk)."""
    num_heads, num_groups = x.shape[-2], B.shape[-2]
    Bh = B.repeat_interleave(num_heads // num_groups, dim=-2).transpose(-3, -2).contiguous()  # [H, Q, N]
    Ch = C.repeat_interleave(num_heads // num_groups, dim=-2).transpose(-3, -2).contiguous()  # [H, Q, N]
    xh, dth = x.transpose(-3, -2).contiguous(), dt.transpose(-2, -1)  # [H, Q, P], [H, Q]
    cs = torch.cumsum(dth * A[:, None], dim=-1)  # [H, Q]
    causal = torch.ones(cs.shape[-1], cs.shape[-1], dtype=torch.bool, device=cs.device).tril()
    decay = torch.where(causal, torch.exp(cs[..., :, None] - cs[..., None, :]), 0.0)  # [H, Qt, Qs]
    weights = (Ch @ Bh.transpose(-1, -2)) * decay * dth[..., None, :]
    y = weights @ xh + (Ch @ state0.transpose(-1, -2)) * torch.exp(cs)[..., None] + D[:, None, None] * xh
    return y.transpose(-3, -2), (cs, xh, dth, Bh)


def end_state(cs, xh, dth, Bh, state0):
    """The state after the chunk [H, P, N] (a leading sequence dim passes through)."""
    to_end = torch.exp(cs[..., -1:] - cs) * dth  # [H, Q]
    return torch.exp(cs[..., -1])[..., None, None] * state0 + (xh * to_end[..., None]).transpose(-1, -2) @ Bh


def run_chunks(rows, state0, A, D, chunk_size):
    """Scan `rows` chunk by chunk from state0 (kernels/ops/chunk_scan.py): (y of every row, the
    state at the last chunk boundary, the state after all rows). Padding rows have dt = 0, so
    they move neither cumsum nor the end state: a partial chunk's end state is exact for its
    real rows."""
    A32, D32 = A.float(), D.float()
    return chunk_scan.run_chunks(lambda *piece_and_state: chunk(*piece_and_state, A32, D32), rows, state0, chunk_size)


def _rows(state, x, B, C, dt):
    """The unfolded rows (buffered, then new) in fp32."""
    return chunk_scan.after_pending(state.pending, [x.float(), B.float(), C.float(), dt])
