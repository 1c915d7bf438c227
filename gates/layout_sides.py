"""The engine and the trainer in several parallel layouts inside one world of processes (gloo,
loopback), for gate C06: each engine layout generates the same seeded requests, each trainer
layout scores one engine layout's completions, each update layout applies one GRPO update to
them; rank 0 returns what every side produced (log-probs, gradients, comm fingerprints and
the collectives each layout ran).

Layouts run one after another on ranks [0, world size) of one world, so the processes start
once (kernels/layout/launch.py); a rank outside the current layout waits.
"""
import importlib
from dataclasses import dataclass

import torch
import torch.distributed as dist

from gates.faults import register_all
from gates.workload import EngineShape, Workload, make_requests, seeded_weights
from kernels.contract import load_contract
from kernels.engine.engine import Engine
from kernels.layout.groups import build_groups
from kernels.models.config import load_model_config
from kernels.trainer.logprobs import scored_sequences
from kernels.trainer.trainer import Trainer

MICRO_BATCH_SIZE = 2


@dataclass(frozen=True)
class SidesPlan:
    """What to run: layouts by name, the model, the contract and the seeded workload."""

    config: str
    """Model config name (the cut)."""
    contract: str
    """Contract name or YAML path."""
    seed: int
    """Weights (seed % 1000), prompts, sampling seeds, arrivals and advantages."""
    workload: Workload
    """The requests every engine layout generates."""
    shape: EngineShape
    """How every engine layout batches."""
    engines: tuple
    """(name, Layout) of each engine run."""
    scorers: tuple
    """(name, Layout, engine name) of each trainer scoring run."""
    updates: tuple
    """(name, Layout, engine name) of each trainer GRPO update."""

    @property
    def world_size(self) -> int:
        return max(layout.world_size for _, layout, *_ in self.engines + self.scorers + self.updates)


def preload_for_fork() -> None:
    """Import what the ranks would each import lazily on the same cores: building the
    trainer's AdamW imports torch._dynamo (~2 s); forked ranks inherit it from here."""
    importlib.import_module("torch._dynamo")


def _engine(plan, config, contract, weights, groups):
    shape = plan.shape
    blocks = -(-(plan.workload.max_prompt_len + plan.workload.new_tokens) // shape.block_size)
    return Engine(config, contract, weights, block_size=shape.block_size, num_blocks=blocks * shape.max_running,
                  max_tokens_per_step=shape.tokens_per_step, max_running=shape.max_running, parallel=groups)


def _side(runtime, groups, **output) -> dict:
    return {"comm": runtime.comm, "calls": dict(groups.calls), "layout": str(groups.layout), **output}


def run_sides(rank: int, plan: SidesPlan) -> dict:
    """Every layout of the plan in turn; {engines, scorers, updates: {name: side result}}."""
    register_all()  # the contract may name a planted fault
    config, contract = load_model_config(plan.config), load_contract(plan.contract)
    weights = seeded_weights(config, plan.seed % 1000)
    requests = make_requests(plan.workload, config.vocab_size)
    results = {"engines": {}, "scorers": {}, "updates": {}}
    generated = {}
    for name, layout in plan.engines:
        groups, shared = build_groups(layout), [None]
        if groups is not None:
            engine = _engine(plan, config, contract, weights, groups)
            completions = engine.generate(requests)
            shared = [(scored_sequences(completions), [c.logprob_tensor for c in completions])]
            results["engines"][name] = _side(engine, groups, logprobs=shared[0][1])
        dist.broadcast_object_list(shared, src=0)  # ranks outside the layout need the sequences
        generated[name] = shared[0]
    for name, layout, source in plan.scorers:
        groups = build_groups(layout)
        if groups is not None:
            trainer = Trainer(config, contract, weights=weights, micro_batch_size=MICRO_BATCH_SIZE, parallel=groups)
            results["scorers"][name] = _side(trainer, groups, logprobs=trainer.score(generated[source][0]))
    for name, layout, source in plan.updates:
        groups = build_groups(layout)
        if groups is not None:
            trainer = Trainer(config, contract, weights=weights, micro_batch_size=MICRO_BATCH_SIZE, parallel=groups)
            sequences, old = generated[source]
            advantages = torch.randn(len(sequences), generator=torch.Generator().manual_seed(plan.seed)).tolist()
            step = trainer.train_step(sequences, advantages, old)
            results["updates"][name] = _side(trainer, groups, gradients=step["gradients"], loss=step["loss"])
    return results
