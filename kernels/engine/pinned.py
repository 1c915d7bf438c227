"""Host staging for the engine's device inputs and results, in two sets used in turn.

Page-locked where a CUDA device exists, so copies are asynchronous (pageable memory makes the host
wait for the stream); plain memory on CPU-only machines. A decode step may launch while the one
before it runs (kernels/engine/look_ahead.py), so a launch fills one set while the previous
launch's copies may still read the other; at most two steps are in flight, so two sets suffice.
"""
import torch


def host_buffer(numel: int, dtype: torch.dtype, fill=0) -> torch.Tensor:
    """[numel] host tensor of `dtype`, filled with `fill`, pinned when CUDA is available."""
    return torch.full((numel,), fill, dtype=dtype, pin_memory=torch.cuda.is_available())


class StagingSets:
    """Named host buffers (name -> (numel, dtype, fill)) in two sets; `next()` gives the set the
    coming launch fills."""

    def __init__(self, **specs):
        self._sets = [{name: host_buffer(*spec) for name, spec in specs.items()} for _ in range(2)]
        self._turn = 0

    def next(self) -> dict:
        self._turn ^= 1
        return self._sets[self._turn]


class ResultCopies:
    """A step's sampled tokens and log-probs copied to the host as soon as they are computed;
    `wait` gives them as lists, waiting for that step alone (an event), not for a step
    launched after it."""

    def __init__(self, max_rows: int):
        self._staging = StagingSets(tokens=(max_rows, torch.int64, 0), logprobs=(max_rows, torch.float32, 0))

    def start(self, tokens: torch.Tensor, logprobs: torch.Tensor):
        """Queue the copies of tokens [R] and log-probs [R]; a ticket for `wait`."""
        staging, count = self._staging.next(), tokens.shape[0]
        host_tokens, host_logprobs = staging["tokens"][:count], staging["logprobs"][:count]
        host_tokens.copy_(tokens, non_blocking=True)
        host_logprobs.copy_(logprobs, non_blocking=True)
        event = None
        if tokens.is_cuda:
            event = torch.cuda.Event()
            event.record()
        return host_tokens, host_logprobs, event

    @staticmethod
    def wait(ticket) -> tuple[list, list]:
        host_tokens, host_logprobs, event = ticket
        if event is not None:
            event.synchronize()
        return host_tokens.tolist(), host_logprobs.tolist()
