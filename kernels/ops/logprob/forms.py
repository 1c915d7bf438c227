"""The logits over each row's temperature, in fp32: what the logprob variants' torch forms and the
eager sampler read (one pass; on CUDA outside autograd one Triton pass, triton.py). The CUDA
kernels that read raw logits (logprob/rows_triton.py, sampler/triton.py) divide with its bits.
"""
import torch

from kernels.ops.autograd_use import records_graph


def scaled(logits, temperatures):
    """[B, V] fp32 logits over each row's temperature, in one pass: half logits widen inside
    the division (exact, so the bits of .float() first). temperatures None: `logits` are
    already over their temperature (a graph head scales once for its draw and log-prob)."""
    if logits.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        logits = logits.float()
    if temperatures is None:
        return logits.float()
    if logits.device.type == "cuda" and logits.dim() == 2 and logits.is_contiguous() and not records_graph(logits):
        import kernels.ops.logprob.triton as logprob_triton  # imports Triton: CUDA machines only
        return logprob_triton.scale_rows(logits, temperatures)
    return logits / temperatures.float()[:, None]
