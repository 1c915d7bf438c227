"""logprob.consistent: one formula for both sides, x[t] - (max + log(sum exp(x - max))), the row
sum in a batch-independent order. On CPU the torch form (kernels/ops/reduction.py's row_sum); on
CUDA the log-sum-exp is Triton kernels over vocabulary chunks fixed by V, reading the logits as
they come (rows_triton.py), called by the engine directly and by the trainer through
_CudaLogSumExp, whose backward is the exact derivative exp(x - lse) / t in torch (gradients are
held to a float64 reference, not to the engine's bits)."""
import torch

from kernels.ops.autograd_use import records_graph
from kernels.ops.logprob.forms import scaled
from kernels.ops.reduction import row_sum


class _CudaLogSumExp(torch.autograd.Function):
    """lse [R] of logits [R, V] over temperatures [R] (or None) by the engine's kernel."""

    @staticmethod
    def forward(ctx, logits, temperatures):
        import kernels.ops.logprob.rows_triton as rows_triton  # imports Triton: CUDA machines only
        lse, _ = rows_triton.consistent_rows(logits.detach(), None, temperatures)
        ctx.save_for_backward(logits, temperatures, lse)
        return lse

    @staticmethod
    def backward(ctx, grad):
        logits, temperatures, lse = ctx.saved_tensors
        x = logits.float() if temperatures is None else logits.float() / temperatures.float()[:, None]
        d_x = torch.exp(x - lse[:, None]) * grad[:, None]
        d_logits = d_x if temperatures is None else d_x / temperatures.float()[:, None]
        return d_logits.to(logits.dtype), None


def _on_cuda(logits, targets, temperatures, full):
    if records_graph(logits):
        lse = _CudaLogSumExp.apply(logits, temperatures)
    else:
        import kernels.ops.logprob.rows_triton as rows_triton  # imports Triton: CUDA machines only
        lse, logp = rows_triton.consistent_rows(logits, None if full else targets, temperatures)
        if not full:
            return logp
    if full:
        return scaled(logits, temperatures) - lse[:, None]
    x_target = logits.gather(-1, targets[:, None])[:, 0].float()  # the division below: scaled's bits
    return (x_target if temperatures is None else x_target / temperatures.float()) - lse


def consistent(logits, targets, temperatures, *, full=False):
    """One formula for both sides: max-shifted sum of exp, row by row, in fp32."""
    if logits.device.type == "cuda" and logits.dim() == 2:
        return _on_cuda(logits, targets, temperatures, full)
    x = scaled(logits, temperatures)
    row_max = x.amax(dim=-1, keepdim=True)
    lse = row_max + torch.log(row_sum(torch.exp(x - row_max)))
    return x - lse if full else (x.gather(-1, targets[:, None]) - lse)[:, 0]
