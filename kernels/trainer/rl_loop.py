"""A GRPO run end to end: engine rollout -> trainer update -> weight sync, one update per step.

Prompts come from a seeded source addressed by index (the data position is one integer);
each request's sampling seed and arrival step derive from (run seed, step, index), so a
resumed run replays exactly what the uninterrupted one would have done. The reward is a
toy verifiable one (share of even token ids): the point is the numerics, not the task.
"""
import random
import time
from dataclasses import asdict, dataclass

import torch

from kernels.engine.engine import Engine
from kernels.engine.request import Request
from kernels.ops.sampler import SamplingParams
from kernels.ops.sampler.forms import mix_seed
from kernels.trainer.checkpoint import load_checkpoint, save_checkpoint
from kernels.trainer.grpo import group_advantages
from kernels.trainer.logprobs import scored_sequences
from kernels.trainer.trainer import Trainer


@dataclass(frozen=True, slots=True)
class GRPOSettings:
    """Knobs of a GRPO run (all part of what a checkpoint must match)."""

    prompts_per_step: int = 4
    """Distinct prompts per step."""
    group_size: int = 4
    """Samples per prompt (GRPO group)."""
    max_new_tokens: int = 16
    """Completion length cap."""
    min_prompt_len: int = 4
    """Shortest prompt."""
    max_prompt_len: int = 24
    """Longest prompt."""
    temperature: float = 1.0
    """Sampling temperature (log-probs are taken at it on both sides)."""
    seed: int = 0
    """Run seed: prompts, sampling seeds, arrivals."""
    lr: float = 1e-3
    """AdamW learning rate."""
    max_arrival_offset: int = 6
    """Requests arrive at random engine steps in [0, this)."""
    engine_tokens_per_step: int = 48
    """Engine token budget per step (forces chunked prefill and mixed steps)."""
    engine_max_running: int = 16
    """Sequences the engine runs at once."""
    engine_kv_blocks: int = 256
    """KV cache blocks of 16 tokens."""
    cuda_graphs: bool = False
    """Decode steps replayed from CUDA graphs (CUDA only)."""
    micro_batch_size: int = 8
    """Trainer sequences per forward and backward."""
    head_chunk_rows: int | None = None
    """Trainer log-prob rows per vocabulary-head chunk (None: one chunk per micro-batch)."""
    recompute_layers: bool = False
    """Trainer per-layer activation recompute (the same bits)."""


@dataclass
class StepRecord:
    """What one GRPO step produced, for checks and reports."""

    step: int
    """Index of the step in the run."""
    rewards: list
    """One reward per completion."""
    engine_logprobs: list
    """Per completion, the engine's log-prob of each sampled token (pi_old)."""
    trainer_logprobs: list
    """The trainer's scores of the same tokens (case trainer_fwd), before the update."""
    update_logprobs: list
    """The log-probs the update's own forward computed (case trainer_bwd)."""
    loss: float
    """GRPO loss of the update."""
    old_logprobs: list = None
    """The log-probs the update took as pi_old: the engine's, or the trainer's recomputed ones."""
    seconds: dict = None
    """Wall time of each phase: rollout, score (0 when skipped), update, sync."""


def prompt_tokens(seed: int, index: int, vocab_size: int, min_len: int, max_len: int) -> tuple:
    rng = random.Random(mix_seed(seed, index))
    return tuple(rng.randrange(1, vocab_size) for _ in range(rng.randint(min_len, max_len)))


def even_token_reward(tokens) -> float:
    return sum(1 for t in tokens if t % 2 == 0) / max(1, len(tokens))


class GRPORun:
    """Owns a trainer and an engine and steps them through GRPO; save() / resume()."""

    def __init__(self, config, contract, settings: GRPOSettings, *, model_seed=0, weights=None, device="cpu"):
        """Weights seeded by model_seed, or a copy of `weights` (a state dict) when given."""
        self.config, self.contract, self.settings = config, contract, settings
        self.device = device
        self.trainer = Trainer(config, contract, seed=model_seed, weights=weights, lr=settings.lr, device=device,
                               micro_batch_size=settings.micro_batch_size, head_chunk_rows=settings.head_chunk_rows,
                               recompute_layers=settings.recompute_layers)
        self.engine = self._new_engine()
        self.step_index = 0
        self.data_position = 0

    def _new_engine(self):
        s = self.settings
        return Engine(self.config, self.contract, self.trainer.weights(), max_tokens_per_step=s.engine_tokens_per_step,
                      max_running=s.engine_max_running, num_blocks=s.engine_kv_blocks, cuda_graphs=s.cuda_graphs,
                      device=self.device)

    def _requests(self) -> list:
        s = self.settings
        arrivals = random.Random(mix_seed(s.seed, 1_000_000 + self.step_index))
        requests = []
        for p in range(s.prompts_per_step):
            prompt = prompt_tokens(s.seed, self.data_position + p, self.config.vocab_size,
                                   s.min_prompt_len, s.max_prompt_len)
            for g in range(s.group_size):
                index = p * s.group_size + g
                seed = mix_seed(mix_seed(s.seed, self.step_index), index)
                requests.append(Request(
                    request_id=index, prompt=prompt, max_new_tokens=s.max_new_tokens,
                    params=SamplingParams(temperature=s.temperature, seed=seed),
                    arrival_step=self.engine.step_count + arrivals.randrange(s.max_arrival_offset)))
        return requests

    def step(self, *, old: str = "engine", score: bool = True) -> StepRecord:
        """Rollout, score, update, sync; the trainer's scores are taken before the update (not
        at all without `score`). `old`: pi_old of the update, the engine's log-probs (the
        rollout's, as behaviour policy) or the trainer's recomputed ones (which need `score`)."""
        if old not in ("engine", "trainer") or (old == "trainer" and not score):
            raise ValueError(f"old={old!r} with score={score}: pi_old is 'engine', or 'trainer' with score")
        clock = time.perf_counter
        started = clock()
        completions = self.engine.generate(self._requests())
        rolled = clock()
        sequences = scored_sequences(completions)
        engine_logprobs = [c.logprob_tensor for c in completions]
        trainer_logprobs = self.trainer.score(sequences) if score else None
        scored = clock()
        rewards = [even_token_reward(c.tokens) for c in completions]
        advantages = group_advantages(rewards, self.settings.group_size)
        old_logprobs = trainer_logprobs if old == "trainer" else engine_logprobs
        result = self.trainer.train_step(sequences, advantages, old_logprobs)
        updated = clock()
        self.engine.load_weights(self.trainer.weights())
        seconds = {"rollout": rolled - started, "score": scored - rolled, "update": updated - scored,
                   "sync": clock() - updated}
        record = StepRecord(self.step_index, rewards, engine_logprobs, trainer_logprobs,
                            result["logprobs"], result["loss"], old_logprobs, seconds)
        self.step_index += 1
        self.data_position += self.settings.prompts_per_step
        return record

    def save(self, directory):
        return save_checkpoint(
            directory, model_state=self.trainer.weights(), master_state=self.trainer.optimizer.master,
            optimizer_state=self.trainer.optimizer.state_dict(),
            run_state={"step": self.step_index, "data_position": self.data_position,
                       "settings": asdict(self.settings), "contract": self.contract.name,
                       "config": asdict(self.config)})

    @classmethod
    def resume(cls, directory, config, contract, settings: GRPOSettings, *, device="cpu"):
        state = load_checkpoint(directory)
        run_state = state["run_state"]
        if run_state["settings"] != asdict(settings) or run_state["config"] != asdict(config):
            raise ValueError(f"{directory}: checkpoint was written with other settings or config")
        if run_state["contract"] != contract.name:
            raise ValueError(f"{directory}: checkpoint was written under contract "
                             f"{run_state['contract']!r}, not {contract.name!r}")
        run = cls(config, contract, settings, device=device)
        run.trainer.load_state(state["model_state"], state["master_state"], state["optimizer_state"])
        torch.set_rng_state(state["torch_rng"])
        run.engine = run._new_engine()
        run.step_index, run.data_position = run_state["step"], run_state["data_position"]
        return run
