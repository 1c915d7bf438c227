"""Whether autograd would record an op. The CUDA regions' autograd Functions exist for the
trainer's backward; the engine (inference mode, no gradients) calls their forward kernels
directly, skipping Function.apply's bookkeeping. The consistent eager prefill was host-bound
(59-94 us of host time per norm or GEMM call under the profiler:
benchmarks/results/gpu_rollout-h200-20261129-session6-profiled.json); this removes one part of
it, and the prefill figures after it (benchmarks/RESULTS.md, session 6) show more remains.
Same kernel either way, so the same bits: gate C03's trainer_fwd == engine checks it."""
import torch


def records_graph(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def grads_of_recomputed(saved, needs_grad, recompute, grad_output) -> tuple:
    """A backward that differentiates a torch form of its forward: the gradients of
    recompute(*inputs) at the saved inputs, None for the inputs that need none. Used where the
    forward is a Triton kernel and the torch form computes the same terms (kernels/ops/ssm_*_triton.py)."""
    with torch.enable_grad():
        inputs = [t.detach().requires_grad_(need) for t, need in zip(saved, needs_grad)]
        wanted = [t for t in inputs if t.requires_grad]
        grads = iter(torch.autograd.grad(recompute(*inputs), wanted, grad_output))
    return tuple(next(grads) if t.requires_grad else None for t in inputs)
