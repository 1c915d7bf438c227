"""Whether autograd would record an op, and a backward that differentiates a torch form.

The CUDA regions' autograd Functions serve the trainer's backward; where nothing needs a gradient
(the engine) their forward kernels are called directly, without Function.apply's bookkeeping: the
same kernel, so the same bits (gate C03 compares trainer_fwd with the engine's cases).
`grads_of_recomputed`: the gradients of a Triton region's torch form at the saved inputs.
"""
import torch


def records_graph(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def grads_of_recomputed(saved, needs_grad, recompute, grad_output) -> tuple:
    """A backward that differentiates a torch form of its forward: the gradients of
    recompute(*inputs) at the saved inputs, None for the inputs that need none. Used where the
    forward is a Triton kernel and the torch form computes the same terms (kernels/ops/ssm_*/triton.py)."""
    with torch.enable_grad():
        inputs = [t.detach().requires_grad_(need) for t, need in zip(saved, needs_grad)]
        wanted = [t for t in inputs if t.requires_grad]
        grads = iter(torch.autograd.grad(recompute(*inputs), wanted, grad_output))
    return tuple(next(grads) if t.requires_grad else None for t in inputs)
