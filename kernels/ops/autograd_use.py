"""Whether autograd would record an op: the CUDA regions' autograd Functions exist for the
trainer's backward, and the engine (inference mode, no gradients) calls their forward kernel
directly. Function.apply's bookkeeping cost 10-60 us of host time per call in the engine's
eager prefill (benchmarks/results/gpu_rollout-h200-20261129-session6-profiled.json: the
consistent prefill step was host-bound). Same kernel either way, so the same bits."""
import torch


def records_graph(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
