"""Per-layer activation recompute for the trainer's update: a layer's forward keeps only its
inputs and runs again during backward to rebuild what backward needs (torch.utils.checkpoint,
non-reentrant). The second forward calls the same region implementations on the same inputs
with autograd recording as in the first, and every consistent implementation is
deterministic (gate C01), so backward sees the bits it would have saved: no gradient bit
moves (tests/test_trainer_memory.py). Observers see a recomputed layer's calls again during
backward. Off unless the trainer asks (Trainer(recompute_layers=True)); never under no_grad.
"""
import torch
from torch.utils.checkpoint import checkpoint


def run_layer(recompute: bool, layer_forward, *inputs):
    """layer_forward(*inputs), its activations recomputed in backward when `recompute`."""
    if recompute and torch.is_grad_enabled():
        return checkpoint(layer_forward, *inputs, use_reentrant=False)
    return layer_forward(*inputs)
