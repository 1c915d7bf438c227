"""Continuous batching with chunked prefill: each step fills a token budget with one decode
token per generating sequence first, then prefill chunks (a long prompt is split over steps),
then admits newly arrived requests while their whole KV (prompt + max_new_tokens) fits.
"""
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScheduledWork:
    """One sequence's share of a step."""

    sequence: object
    """The RunningSequence."""
    num_tokens: int
    """Rows this step computes for it, starting at sequence.num_computed."""
    phase: str
    """"prefill" or "decode"."""


class Scheduler:
    """Decides which rows of which sequences each step computes."""

    def __init__(self, cache, *, max_tokens_per_step: int, max_running: int):
        if max_tokens_per_step <= 0 or max_running <= 0:
            raise ValueError("max_tokens_per_step and max_running must be positive")
        self.cache = cache
        self.max_tokens_per_step = max_tokens_per_step
        self.max_running = max_running
        self.waiting: deque = deque()
        self.running: list = []

    def schedule(self) -> list:
        budget = self.max_tokens_per_step
        work = []
        for sequence in self.running:
            pending = sequence.num_tokens - sequence.num_computed
            if pending == 1 and sequence.completion.tokens and budget > 0:
                work.append(ScheduledWork(sequence, 1, "decode"))
                budget -= 1
        for sequence in self.running:
            pending = sequence.num_tokens - sequence.num_computed
            if (pending > 1 or not sequence.completion.tokens) and budget > 0:
                chunk = min(pending, budget)
                work.append(ScheduledWork(sequence, chunk, "prefill"))
                budget -= chunk
        while self.waiting and budget > 0 and len(self.running) < self.max_running:
            sequence = self.waiting[0]
            request = sequence.request
            needed = self.cache.blocks_needed(len(request.prompt) + request.max_new_tokens)
            if needed > self.cache.num_free_blocks:
                break
            self.waiting.popleft()
            self.cache.reserve(request.request_id, len(request.prompt) + request.max_new_tokens)
            self.running.append(sequence)
            chunk = min(len(request.prompt), budget)
            work.append(ScheduledWork(sequence, chunk, "prefill"))
            budget -= chunk
        return work

    def finish(self, sequence) -> None:
        self.running.remove(sequence)
        self.cache.release(sequence.request.request_id)
