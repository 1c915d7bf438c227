"""A generation request and the engine's running record of it."""
from dataclasses import dataclass, field

import torch

from kernels.ops.sampler import SamplingParams


@dataclass(frozen=True, slots=True)
class Request:
    """What a caller asks the engine for."""

    request_id: int
    """Unique id; also the sequence id in the KV cache."""
    prompt: tuple
    """Prompt token ids."""
    max_new_tokens: int
    """Generation stops after this many tokens."""
    params: SamplingParams = SamplingParams()
    """Temperature, top-k, top-p and the per-request seed."""
    arrival_step: int = 0
    """Engine step at which the request arrives (continuous batching)."""
    stop_token: int | None = None
    """Generation also stops after this token."""
    return_full_logprobs: bool = False
    """Keep the whole log-softmax row of every sampled position."""

    def __post_init__(self):
        if not self.prompt:
            raise ValueError(f"request {self.request_id}: prompt must not be empty")
        if self.max_new_tokens <= 0:
            raise ValueError(f"request {self.request_id}: max_new_tokens must be positive")


@dataclass
class Completion:
    """What the engine hands back: tokens and their log-probs."""

    request: Request
    tokens: list = field(default_factory=list)
    """Generated token ids."""
    logprobs: list = field(default_factory=list)
    """The log-prob of each generated token, as Python floats holding the fp32 values
    exactly (fp32 -> float64 -> fp32 keeps every bit): the engine copies a step's log-probs
    to the host once, not one device scalar per token."""
    full_logprobs: list = field(default_factory=list)
    """[V] fp32 rows when requested."""
    device: str = "cpu"
    """Where logprob_tensor puts the log-probs (the engine's device)."""

    @property
    def logprob_tensor(self) -> torch.Tensor:
        """[T] fp32 log-probs of the generated tokens, on the engine's device."""
        return torch.tensor(self.logprobs, dtype=torch.float32, device=self.device)


@dataclass
class RunningSequence:
    """A request in flight: its completion so far and how much of it the cache holds."""

    completion: Completion
    num_computed: int = 0
    """Tokens whose KV is in the cache."""

    @property
    def request(self) -> Request:
        return self.completion.request

    @property
    def num_tokens(self) -> int:
        """Prompt and generated tokens so far (a step's bookkeeping reads this, not a list)."""
        return len(self.request.prompt) + len(self.completion.tokens)

    def tokens_between(self, start: int, end: int) -> list:
        """Token ids at positions [start, end) of prompt + generated tokens."""
        prompt = self.request.prompt
        if end <= len(prompt):
            return list(prompt[start:end])
        generated = self.completion.tokens
        return list(prompt[start:]) + generated[max(0, start - len(prompt)):end - len(prompt)]

    @property
    def is_finished(self) -> bool:
        tokens = self.completion.tokens
        if len(tokens) >= self.request.max_new_tokens:
            return True
        return bool(tokens) and tokens[-1] == self.request.stop_token
