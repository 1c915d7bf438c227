"""Gate C06: layout consistency.

Passes when, on the model at the asked size (--size; the cut by default), with every side in
its own TP/EP/DP layout on torch.distributed (gloo over loopback on the CPU, NCCL with one GPU
per rank under --device cuda), the rollout and the trainer give identical bits: the per-token
log-probs of engine TP2 equal trainer TP1's and TP4's scores of the same tokens and, on models
with routed experts, engine EP2's equal trainer EP4's and EP1's and engine TP2's equal trainer
TP2 EP2's; trainer DP2's scores and one GRPO update's reduced gradients equal trainer DP1's;
every multi-rank layout ran its collectives, all sides report the same comm backend and
transport, and every TP size the contract claims (claims: tp_sizes) that fits the ranks here
was run. A pair needing more GPUs than the machine has is n/a, with the count.
Negative control: layouts that reduce in rank order (the fast contract, or the consistent
regions with the fast layout arithmetic) fail it (tests/test_gate_c06.py).
"""
import os
import tempfile

import torch

from gates import device
from gates.compare import bit_figures
from gates.inputs import fresh_seed
from gates.layout_sides import SidesPlan, preload_for_fork, run_sides
from gates.subject import subject_config_path, subject_label
from gates.workload import EngineShape, Workload
from kernels.contract import load_contract
from kernels.layout.launch import run_processes
from kernels.layout.layout import Layout, SideLayouts
from kernels.models.config import load_model_config


TP_PAIRS = (SideLayouts(Layout(tp=2), Layout(tp=1)), SideLayouts(Layout(tp=2), Layout(tp=4)))
EXPERT_PAIRS = (SideLayouts(Layout(ep=2), Layout(ep=4)), SideLayouts(Layout(ep=2), Layout(ep=1)),
                SideLayouts(Layout(tp=2), Layout(tp=2, ep=2)))
DP_PAIR = (Layout(dp=2), Layout(dp=1))
WORKLOAD = dict(num_sequences=8, new_tokens=12, min_prompt_len=6, max_prompt_len=24, arrival_spread=4)
CPU_RANKS = 4
"""gloo ranks are processes: every pair fits on the CPU."""


def transport() -> tuple:
    """(backend, ranks available, how the ranks talk) for the selected device."""
    if device.target() == "cuda":
        return "nccl", torch.cuda.device_count(), "NCCL, one process per GPU"
    return "gloo", CPU_RANKS, "gloo over loopback, one process per rank"


def model_pairs(config) -> tuple:
    """The engine/trainer layout pairs this model can run (EP needs routed experts)."""
    return TP_PAIRS + (EXPERT_PAIRS if "moe" in getattr(config, "block_types", ()) else ())


def scorer_name(trainer: Layout, engine: Layout) -> str:
    return f"trainer {trainer} scoring engine {engine}"


def make_plan(config: str, pairs: tuple, contract: str, seed: int, backend: str) -> SidesPlan:
    """Engine runs, trainer scorings and updates for `pairs` and the DP pair."""
    engines = tuple({f"engine {p.engine}": p.engine for p in pairs}.items())
    source = TP_PAIRS[0].engine
    scorers = {scorer_name(p.trainer, p.engine): (p.trainer, f"engine {p.engine}") for p in pairs}
    scorers.update({scorer_name(layout, source): (layout, f"engine {source}") for layout in DP_PAIR})
    updates = tuple((f"update {layout}", layout, f"engine {source}") for layout in DP_PAIR)
    return SidesPlan(config, contract, seed, Workload(seed=seed, **WORKLOAD),
                     EngineShape(tokens_per_step=24, max_running=8), engines,
                     tuple((name, layout, src) for name, (layout, src) in scorers.items()), updates, backend)


def check_figures(gate, name: str, figures: dict, same_count: bool = True) -> None:
    """A bit condition from bit_figures: something compared (nothing compared proves nothing),
    nothing differs."""
    gate.check(name, same_count and figures["num_compared"] > 0 and figures["num_differing"] == 0, **figures)


def check_pair(gate, name: str, left: list, right: list, labels=None) -> None:
    figures = bit_figures(left, right, labels or [f"sequence {i}" for i in range(len(left))])
    check_figures(gate, name, figures, same_count=len(left) == len(right))


def check_sides(gate, plan: SidesPlan, result: dict, contract, ranks: int) -> None:
    """The conditions besides the bit pairs: collectives ran, one transport, TP claims run."""
    layouts = {name: layout for name, layout, *_ in plan.engines + plan.scorers + plan.updates}
    sides = {**result["engines"], **result["scorers"], **result["updates"]}
    silent = sorted(name for name, layout in layouts.items() if layout.world_size > 1 and not sides[name]["calls"])
    gate.check("every multi-rank layout exchanged data through its collectives", not silent,
               silent=silent, calls={name: side["calls"] for name, side in sides.items()})
    fingerprints = {name: side["comm"] for name, side in sides.items()}
    first = next(iter(fingerprints.values()))
    gate.check("engine and trainer report the same comm backend and transport",
               all(f == first for f in fingerprints.values()), fingerprints=fingerprints)
    claimed = set(contract.claims.get("tp_sizes", ()))
    fits = {size for size in claimed if size <= ranks}
    ran = {layout.tp for name, layout in layouts.items() if name in sides}
    gate.check("every TP size the contract claims (claims: tp_sizes) that fits here was run", fits <= ran,
               claimed=sorted(claimed), ran=sorted(ran), ranks=ranks)
    if claimed - fits:
        gate.check_n_a(f"claimed TP sizes {sorted(claimed - fits)} run",
                       f"they need more than the {ranks} ranks this machine has")


def test_layouts_give_identical_bits(gate):
    backend, ranks, how = transport()
    if ranks < 2:
        gate.n_a(f"{backend}: a layout needs at least 2 ranks, this machine has {ranks} GPU(s)")
    config = subject_config_path(gate, gate.size, tempfile.mkdtemp(prefix="c06-"))  # weights stay seeded
    pairs = model_pairs(load_model_config(config))
    fitting = tuple(p for p in pairs if max(p.engine.world_size, p.trainer.world_size) <= ranks)
    seed = fresh_seed()
    plan = make_plan(config, fitting, gate.contract, seed, backend)
    gate.inputs = {"seed": seed, "config": subject_label(gate, gate.size), "world_size": plan.world_size, "workload": WORKLOAD,
                   "engines": [n for n, _ in plan.engines], "scorers": [n for n, *_ in plan.scorers],
                   "updates": [n for n, *_ in plan.updates], "transport": how, "ranks_available": ranks}
    if backend == "gloo":
        preload_for_fork()
    # gloo ranks share the CPU's cores for their arithmetic; a GPU rank's host work (seeding
    # full-width weights) gets its share of the cores
    threads = 1 if backend == "gloo" else max(1, (os.cpu_count() or 1) // plan.world_size)
    result = run_processes(run_sides, plan.world_size, plan, backend=plan.backend, threads=threads)
    engines, scorers, updates = result["engines"], result["scorers"], result["updates"]
    for pair in TP_PAIRS + EXPERT_PAIRS:
        name = f"{pair}: per-token log-probs bitwise equal"
        if pair not in pairs:
            gate.check_n_a(name, f"{config} has no routed experts to split")
        elif pair not in fitting:
            needed = max(pair.engine.world_size, pair.trainer.world_size)
            gate.check_n_a(name, f"needs {needed} ranks ({backend}), this machine has {ranks}")
        else:
            check_pair(gate, name, engines[f"engine {pair.engine}"]["logprobs"],
                       scorers[scorer_name(pair.trainer, pair.engine)]["logprobs"])
    wide, one = DP_PAIR
    source = TP_PAIRS[0].engine
    check_pair(gate, f"trainer {wide} vs trainer {one}: per-token log-probs bitwise equal",
               scorers[scorer_name(wide, source)]["logprobs"], scorers[scorer_name(one, source)]["logprobs"])
    check_figures(gate, f"trainer {wide} vs trainer {one}: one GRPO update's reduced gradients bitwise equal",
                  updates[f"update {one}"]["gradients_vs_first"])
    check_sides(gate, plan, result, load_contract(gate.contract), ranks)
    gate.verdict()
