"""The rollout-vs-trainer workload: the engine generates under continuous batching (random
prompt lengths, random arrival steps, mixed sampling settings, a small token budget so prefill
is chunked and mixed with decodes), then the trainer scores the same tokens.

Seeded end to end: the seed is returned with the figures so any run can be replayed.
"""
import random
from dataclasses import dataclass

from gates import device
from kernels.engine.engine import Engine
from kernels.engine.request import Request
from kernels.models.registry import build_model
from kernels.ops.sampler import SamplingParams
from kernels.trainer.logprobs import scored_sequences
from kernels.trainer.trainer import Trainer


@dataclass(frozen=True, slots=True)
class Workload:
    """What the engine is asked to generate."""

    num_sequences: int = 64
    """Requests generated."""
    new_tokens: int = 64
    """max_new_tokens of each (no stop token, so every request generates this many)."""
    min_prompt_len: int = 8
    """Shortest prompt."""
    max_prompt_len: int = 80
    """Longest prompt (crosses several KV blocks)."""
    arrival_spread: int = 40
    """Requests arrive at random engine steps in [0, this)."""
    longest_prompts: int = 0
    """The first this many requests take a prompt of max_prompt_len exactly: a workload sized
    to cross a boundary crosses it whatever the seed."""
    seed: int = 0
    """Prompts, sampling seeds and arrivals."""

    def __post_init__(self):
        for name in ("num_sequences", "new_tokens", "min_prompt_len", "arrival_spread"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be positive, got {getattr(self, name)}")
        if self.max_prompt_len < self.min_prompt_len:
            raise ValueError("max_prompt_len: must be >= min_prompt_len")


@dataclass(frozen=True, slots=True)
class EngineShape:
    """How the engine batches: the knobs that change batch composition."""

    tokens_per_step: int = 48
    """Token budget per engine step."""
    max_running: int = 16
    """Sequences in flight."""
    block_size: int = 16
    """KV cache block size."""


def make_requests(workload: Workload, vocab_size: int) -> list:
    rng = random.Random(workload.seed)
    samplings = [SamplingParams(1.0), SamplingParams(0.7, top_k=50), SamplingParams(1.0, top_p=0.9),
                 SamplingParams(0.0)]
    requests = []
    for index in range(workload.num_sequences):
        length = rng.randint(workload.min_prompt_len, workload.max_prompt_len)
        length = workload.max_prompt_len if index < workload.longest_prompts else length
        prompt = tuple(rng.randrange(1, vocab_size) for _ in range(length))
        base = samplings[index % len(samplings)]
        params = SamplingParams(base.temperature, base.top_k, base.top_p, seed=rng.randrange(2**62))
        requests.append(Request(index, prompt, workload.new_tokens, params,
                                arrival_step=rng.randrange(workload.arrival_spread)))
    return requests


def make_engine(config, contract, weights, workload: Workload, shape: EngineShape = EngineShape(), **options):
    """An engine sized for the workload (a tracer may attach before it generates); `options`
    go to Engine (device, cuda_graphs; the device defaults to the gates' target)."""
    blocks_per_sequence = -(-(workload.max_prompt_len + workload.new_tokens) // shape.block_size)
    return Engine(config, contract, weights, block_size=shape.block_size,
                  num_blocks=blocks_per_sequence * shape.max_running,
                  max_tokens_per_step=shape.tokens_per_step, max_running=shape.max_running,
                  **{"device": device.target(), **options})


def rollout(config, contract, weights, workload: Workload, shape: EngineShape = EngineShape(), **options):
    """(completions in request order, the engine) — the engine's step_phases show how the
    steps mixed prefill and decode. `options` go to Engine (make_engine)."""
    engine = make_engine(config, contract, weights, workload, shape, **options)
    return engine.generate(make_requests(workload, config.vocab_size)), engine


def score(config, contract, weights, completions, *, micro_batch_size=8, layout="packed"):
    """The trainer's per-token log-probs of the same completions."""
    return score_sequences(config, contract, weights, scored_sequences(completions),
                           micro_batch_size=micro_batch_size, layout=layout)


def score_sequences(config, contract, weights, sequences, *, micro_batch_size=8, layout="packed"):
    """The trainer's per-token log-probs of ScoredSequences (prompt, completion, temperature)."""
    trainer = Trainer(config, contract, weights=weights, micro_batch_size=micro_batch_size,
                      layout=layout, device=device.target())
    return trainer.score(sequences)


def seeded_weights(config, model_seed: int = 0) -> dict:
    return {k: v.detach() for k, v in build_model(config, model_seed).state_dict().items()}
