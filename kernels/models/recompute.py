"""Per-layer activation recompute for the trainer's update (torch.utils.checkpoint, non-reentrant).

A layer keeps only its inputs and runs again in backward, calling the same region implementations
on the same inputs with autograd recording as before; every consistent one is deterministic (gate
C01), so backward sees the bits it would have saved (tests/trainer/test_trainer_memory.py). Observers see
the layer's calls again. Off unless Trainer(recompute_layers=True); never under no_grad.
"""
import torch
from torch.utils.checkpoint import checkpoint


def run_layer(recompute: bool, layer_forward, *inputs):
    """layer_forward(*inputs), its activations recomputed in backward when `recompute`."""
    if recompute and torch.is_grad_enabled():
        return checkpoint(layer_forward, *inputs, use_reentrant=False)
    return layer_forward(*inputs)
