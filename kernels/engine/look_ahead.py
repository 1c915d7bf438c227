"""Look-ahead: the engine launches the next decode step before this one's results reach the host.

Only when a step holds every running sequence, none ends by length and no request is due: the next
step's work is then known but for the tokens just sampled, read on the device. A sequence that
stops meanwhile leaves one row computed for nothing (its KV in its own blocks), then dropped. Rows
do not change bits with their batch under the consistent contract, so the completions equal a
step-by-step engine's; a request added meanwhile joins one step later.
"""
from dataclasses import dataclass

import torch


@dataclass
class Launched:
    """A step on the device: the items that sample, their results on the way to the host."""

    items: list
    """ScheduledWork of the rows that sample, in row order."""
    tokens: torch.Tensor
    """[R] long on the device: a step launched ahead reads its token ids from it."""
    ticket: tuple
    """ResultCopies ticket of tokens and log-probs."""
    full: torch.Tensor | None
    """[R, V] fp32 full log-prob rows, when a row asked for them."""
    rows: list | None = None
    """Which of the launched rows `items` are (None: all); a step launched ahead loses the
    rows of sequences that ended meanwhile."""


def adopt(ahead: "Launched | None") -> "Launched | None":
    """The step launched ahead without the rows whose sequence has ended since; None when
    there is none or no row is left."""
    if ahead is None:
        return None
    keep = [i for i, item in enumerate(ahead.items) if not item.sequence.is_finished]
    if len(keep) == len(ahead.items):
        return ahead
    if not keep:
        return None
    return Launched([ahead.items[i] for i in keep], None, ahead.ticket, ahead.full, keep)


def next_step_is_known(work, launched, scheduler, pending, step_count: int) -> bool:
    """Whether the next step is this step's rows one token on: every running sequence
    decodes and samples here, none ends by length, no request waits or is due."""
    if launched.tokens is None or len(launched.items) != len(work):
        return False
    if scheduler.waiting or any(s.request.arrival_step <= step_count for s in pending):
        return False
    sequences = [item.sequence for item in work]
    if any(item.phase != "decode" for item in work) or sequences != scheduler.running:
        return False
    return all(draw_index(s) + 1 < s.request.max_new_tokens for s in sequences)


def draw_index(sequence) -> int:
    """Which generated token the row at the sequence's last computed position draws."""
    return sequence.num_computed - len(sequence.request.prompt)
