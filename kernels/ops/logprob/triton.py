"""Logits over each row's temperature on CUDA through Triton: y[r, v] = fp32(x[r, v]) / t[r].

forms.py's `scaled` in one pass, a program per (row, BLOCK of the vocabulary). The division is
IEEE round-to-nearest (div_rn) and widening a half value to fp32 is exact, so every element has
the bits of torch's `x.float() / t[:, None]` whatever the launch: the trainer's autograd path,
which stays on torch, agrees. Imports Triton: CUDA machines (or TRITON_INTERPRET=1 tests) only.
"""
import torch
import triton
import triton.language as tl

BLOCK, NUM_WARPS = 4096, 8


@triton.jit(do_not_specialize=["vocab"])
def _scale_rows_kernel(x_ptr, t_ptr, y_ptr, vocab, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # rows * vocab may pass 2**31
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < vocab
    x = tl.load(x_ptr + row * vocab + offs, mask=mask).to(tl.float32)
    tl.store(y_ptr + row * vocab + offs, tl.math.div_rn(x, tl.load(t_ptr + row)), mask=mask)


def scale_rows(logits: torch.Tensor, temperatures: torch.Tensor) -> torch.Tensor:
    """[R, V] fp32 logits / temperatures[:, None], from contiguous fp32 or half logits [R, V]."""
    rows, vocab = logits.shape
    out = torch.empty((rows, vocab), dtype=torch.float32, device=logits.device)
    if rows and vocab:
        _scale_rows_kernel[(rows, triton.cdiv(vocab, BLOCK))](
            logits, temperatures.to(logits.device, torch.float32).contiguous(), out, vocab,
            BLOCK=BLOCK, num_warps=NUM_WARPS)
    return out
