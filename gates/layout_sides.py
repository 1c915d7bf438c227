"""The engine and the trainer in several parallel layouts inside one world of processes (gloo over
loopback on the CPU, NCCL with one GPU per rank), for gate C06. Each engine layout generates the
same seeded requests, each trainer layout scores one engine layout's completions, each update
layout applies one GRPO update to them. Rank 0 returns every side's log-probs, comm fingerprints
and collectives (host copies), each update's reduced gradients as per-parameter sha256 digests,
and how each later update compares bit for bit with the first (computed on the ranks: a
full-width model's gradients would not fit through the parent). Layouts run one after another on
ranks [0, size) of one world, started once (kernels/layout/launch.py); other ranks wait.
"""
import importlib
from dataclasses import dataclass

import torch
import torch.distributed as dist

from gates.compare import bit_figures, tensor_digest
from gates.faults import register_all
from gates.workload import EngineShape, Workload, make_requests, seeded_weights
from kernels.contract import load_contract
from kernels.engine.engine import Engine
from kernels.layout.groups import build_groups, host_copy
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
    """(name, Layout, engine name) of each trainer GRPO update; the first is the reference."""
    backend: str = "gloo"
    """gloo (CPU ranks) or nccl (rank r on GPU r)."""

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
                  max_tokens_per_step=shape.tokens_per_step, max_running=shape.max_running, parallel=groups,
                  device=groups.device)


def _trainer(config, contract, weights, groups):
    return Trainer(config, contract, weights=weights, micro_batch_size=MICRO_BATCH_SIZE, parallel=groups,
                   device=groups.device)


def _side(runtime, groups, **output) -> dict:
    return {"comm": runtime.comm, "calls": dict(groups.calls), "layout": str(groups.layout), **host_copy(output)}


def _gradient_figures(reference: dict, other: dict) -> dict:
    names = sorted(reference)
    return bit_figures([reference[n] for n in names], [other[n] for n in names], names)


def run_sides(rank: int, plan: SidesPlan) -> dict:
    """Every layout of the plan in turn; {engines, scorers, updates: {name: side result}}, each
    update after the first with `gradients_vs_first` (bit figures against the first's)."""
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
            shared = [host_copy((scored_sequences(completions), [c.logprob_tensor for c in completions]))]
            results["engines"][name] = _side(engine, groups, logprobs=shared[0][1])
            del engine
        dist.broadcast_object_list(shared, src=0)  # ranks outside the layout need the sequences
        generated[name] = shared[0]
    for name, layout, source in plan.scorers:
        groups = build_groups(layout)
        if groups is not None:
            trainer = _trainer(config, contract, weights, groups)
            results["scorers"][name] = _side(trainer, groups, logprobs=trainer.score(generated[source][0]))
            del trainer  # a full-width trainer is freed before the next one is built
    reference = None
    for name, layout, source in plan.updates:
        groups = build_groups(layout)
        if groups is not None:
            trainer = _trainer(config, contract, weights, groups)
            sequences, old = generated[source]
            advantages = torch.randn(len(sequences), generator=torch.Generator().manual_seed(plan.seed)).tolist()
            step = trainer.train_step(sequences, advantages, [lp.to(groups.device) for lp in old])
            side = _side(trainer, groups, loss=step["loss"])
            del trainer
            if rank == 0:
                side["gradient_digests"] = {n: tensor_digest(g) for n, g in sorted(step["gradients"].items())}
            if reference is None:
                reference = step["gradients"]
            elif rank == 0:
                side["gradients_vs_first"] = _gradient_figures(reference, step["gradients"])
            results["updates"][name] = side
    return results
