"""Per-token log-probs of completions, computed by the trainer over micro-batches.

Sequences are *packed* (end to end) or *padded* (to the micro-batch's longest; causal attention
never lets a real row see the pads). Row t predicts token t+1; only rows that predict completion
tokens go through lm_head and log-prob, under autograd in trainer_bwd through the chunked head
(kernels/trainer/chunked_head.py: no [tokens, V] logits saved).
"""
from dataclasses import dataclass

import torch

from kernels.models.batch import TokenBatch
from kernels.models.state import TransientCache
from kernels.trainer.chunked_head import FOLD_ROWS, head_logprobs

LAYOUTS = ("packed", "padded")
PAD_TOKEN = 0


@dataclass(frozen=True, slots=True)
class ScoredSequence:
    """A prompt and the completion whose token log-probs the trainer computes."""

    prompt: tuple
    """Prompt token ids."""
    completion: tuple
    """Generated token ids, whose log-probs are wanted."""
    temperature: float = 1.0
    """Temperature of the distribution the log-probs are taken from."""


def scored_sequences(completions) -> list:
    """What the trainer scores for engine completions: prompt, generated tokens, temperature."""
    return [ScoredSequence(c.request.prompt, tuple(c.tokens), c.request.params.logprob_temperature)
            for c in completions]


def sequence_logprobs(model, dispatch, sequences, case, *, micro_batch_size=8, layout="packed",
                      head_chunk_rows=None, head_fold_rows=FOLD_ROWS):
    """One fp32 tensor [len(completion)] per sequence, in input order. head_chunk_rows,
    head_fold_rows: the chunked head's (under autograd in trainer_bwd)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout: {layout!r} is not one of {LAYOUTS}")
    if micro_batch_size <= 0:
        raise ValueError("micro_batch_size: must be positive")
    results = []
    for lo in range(0, len(sequences), micro_batch_size):
        results.extend(_micro_batch(model, dispatch, sequences[lo:lo + micro_batch_size], case, layout,
                                    (head_chunk_rows, head_fold_rows)))
    return results


def _micro_batch(model, dispatch, sequences, case, layout, chunking):
    token_lists = [list(s.prompt) + list(s.completion) for s in sequences]
    if layout == "padded":
        width = max(len(ids) for ids in token_lists)
        token_lists = [ids + [PAD_TOKEN] * (width - len(ids)) for ids in token_lists]
    device = model.embed_tokens.device
    batch = TokenBatch.from_sequences([(i, 0, ids) for i, ids in enumerate(token_lists)], case,
                                      device=device)
    hidden = model(batch, dispatch, TransientCache(model.config.num_layers, model.config.kv_cache_dtype))
    rows, targets, temperatures = [], [], []
    for sequence, segment in zip(sequences, batch.segments):
        first = segment.row + len(sequence.prompt) - 1
        rows.extend(range(first, first + len(sequence.completion)))
        targets.extend(sequence.completion)
        temperatures.extend([sequence.temperature] * len(sequence.completion))
    rows = torch.tensor(rows, dtype=torch.long, device=device)
    targets = torch.tensor(targets, dtype=torch.long, device=device)
    temperatures = torch.tensor(temperatures, dtype=torch.float32, device=device)
    if case == "trainer_bwd" and torch.is_grad_enabled():
        logprobs = head_logprobs(hidden[rows], model.head_weight, targets, temperatures, dispatch, case, rows,
                                 chunk_rows=chunking[0], fold_rows=chunking[1])
    else:
        with dispatch.selecting_rows(rows):
            logits = model.logits(hidden[rows], dispatch, case)
            logprobs = dispatch("logprob", case, None, logits, targets, temperatures)
    return list(logprobs.split([len(s.completion) for s in sequences]))
