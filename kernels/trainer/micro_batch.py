"""One micro-batch's share of a GRPO update: its forward, its share of the loss and its own
backward, so autograd holds one micro-batch's graph at a time.

The share is policy_loss over the micro-batch's sequences times (its sequences / all), so the
shares add up to the step's loss; each share's gradient (in the parameter's dtype) is folded
by the caller into its leaf (kernels/trainer/gradient_leaves.py).
"""
import torch

from kernels.trainer.grpo import policy_loss
from kernels.trainer.logprobs import sequence_logprobs


def micro_batches(num_sequences: int, micro_batch_size: int) -> list:
    """The step's micro-batches: consecutive runs of micro_batch_size sequence indices."""
    return [list(range(lo, min(lo + micro_batch_size, num_sequences)))
            for lo in range(0, num_sequences, micro_batch_size)]


def leaf(trainer, sequences, advantages, old_logprobs, indices):
    """(log-probs, loss share, {name: gradient, zeros where none flowed}) of the micro-batch
    `indices`; the parameters' .grad are handed over and left empty."""
    logprobs = sequence_logprobs(trainer.model, trainer.dispatch, [sequences[i] for i in indices],
                                 "trainer_bwd", micro_batch_size=trainer.micro_batch_size, layout=trainer.layout,
                                 head_chunk_rows=trainer.head_chunk_rows, head_fold_rows=trainer.head_fold_rows)
    loss = policy_loss(logprobs, [old_logprobs[i] for i in indices],
                       [advantages[i] for i in indices]) * (len(indices) / len(sequences))
    loss.backward()
    grads = {}
    for name, param in trainer.model.named_parameters():
        grads[name] = torch.zeros_like(param) if param.grad is None else param.grad
        param.grad = None
    return [lp.detach() for lp in logprobs], loss.detach(), grads
