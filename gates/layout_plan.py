"""C06's worker side (gates/test_c06_layout.py judges): which engine/trainer layout pairs the
model runs on the ranks the judge grants, one world of processes running every layout in turn
(gates/layout_sides.py), and the outcome as JSON: each side's per-token log-probs as int32
bits, the collectives it ran and its comm fingerprint; each update's reduced gradients as
sha256 digests per parameter (and, for the record, bit figures against the first update's,
taken where the gradients are: a full-width model's would not fit through the judge).
"""
import os
import tempfile

from gates.boundaries import boundaries
from gates.compare import int32_bits
from gates.layout_sides import SidesPlan, preload_for_fork, run_sides
from gates.subject import subject_config_path, subject_label
from gates.workload import EngineShape, Workload, make_requests
from kernels.contract import load_contract
from kernels.contract.dispatch import routed_experts
from kernels.layout.launch import run_processes
from kernels.layout.layout import Layout, SideLayouts
from kernels.models.config import load_model_config

TP_PAIRS = (SideLayouts(Layout(tp=2), Layout(tp=1)), SideLayouts(Layout(tp=2), Layout(tp=4)))
EXPERT_PAIRS = (SideLayouts(Layout(ep=2), Layout(ep=4)), SideLayouts(Layout(ep=2), Layout(ep=1)),
                SideLayouts(Layout(tp=2), Layout(tp=2, ep=2)))
DP_PAIR = (Layout(dp=2), Layout(dp=1))
WORKLOAD = dict(num_sequences=8, new_tokens=12, min_prompt_len=6, max_prompt_len=24, arrival_spread=4)


def model_pairs(config) -> tuple:
    """The engine/trainer layout pairs this model can run (EP needs routed experts)."""
    return TP_PAIRS + (EXPERT_PAIRS if routed_experts(config) else ())


def scorer_name(trainer: Layout, engine: Layout) -> str:
    return f"trainer {trainer} scoring engine {engine}"


def crossing_workload(seed: int, key_block: int) -> Workload:
    """WORKLOAD with every prompt long enough that each context (prompt + new tokens) runs past
    the key block: the layouts compare attention on both sides of it (gates/boundaries.py)."""
    shortest = max(WORKLOAD["min_prompt_len"], key_block + 2 - WORKLOAD["new_tokens"])
    return Workload(seed=seed, **dict(WORKLOAD, min_prompt_len=shortest,
                                      max_prompt_len=max(shortest, WORKLOAD["max_prompt_len"])))


def make_plan(config: str, pairs: tuple, contract: str, workload: Workload, backend: str) -> SidesPlan:
    """Engine runs, trainer scorings and updates for `pairs` and the DP pair."""
    engines = tuple({f"engine {p.engine}": p.engine for p in pairs}.items())
    source = TP_PAIRS[0].engine
    scorers = {scorer_name(p.trainer, p.engine): (p.trainer, f"engine {p.engine}") for p in pairs}
    scorers.update({scorer_name(layout, source): (layout, f"engine {source}") for layout in DP_PAIR})
    updates = tuple((f"update {layout}", layout, f"engine {source}") for layout in DP_PAIR)
    return SidesPlan(config, contract, workload.seed, workload,
                     EngineShape(tokens_per_step=24, max_running=8), engines,
                     tuple((name, layout, src) for name, (layout, src) in scorers.items()), updates, backend)


def _side(layout, side: dict) -> dict:
    """One side's outcome as JSON."""
    return {"world_size": layout.world_size, "tp": layout.tp, "calls": side["calls"], "comm": side["comm"],
            "logprobs": [int32_bits(t) for t in side["logprobs"]] if "logprobs" in side else None,
            "gradient_digests": side.get("gradient_digests"), "gradients_vs_first": side.get("gradients_vs_first")}


def run_layouts(subject, size: str, seed: int, backend: str, ranks: int) -> dict:
    """Every pair that fits in `ranks` (and the DP pair) run on `backend`: {config, world_size,
    pairs: [{name, engine, scorer, applies, needed}], dp: {name, wide, one, first_update,
    update}, sides: {name: outcome}, claimed_tp}."""
    config = subject_config_path(subject, size, tempfile.mkdtemp(prefix="c06-"))  # weights stay seeded
    loaded = load_model_config(config)
    pairs, crossing = model_pairs(loaded), boundaries(load_contract(subject.contract), loaded)
    fitting = tuple(p for p in pairs if max(p.engine.world_size, p.trainer.world_size) <= ranks)
    workload = crossing_workload(seed, crossing["key_block"])
    plan = make_plan(config, fitting, subject.contract, workload, backend)
    if backend == "gloo":
        preload_for_fork()
    # gloo ranks share the CPU's cores for their arithmetic; a GPU rank's host work (seeding
    # full-width weights) gets its share of the cores
    threads = 1 if backend == "gloo" else max(1, (os.cpu_count() or 1) // plan.world_size)
    result = run_processes(run_sides, plan.world_size, plan, backend=plan.backend, threads=threads)
    layouts = {name: layout for name, layout, *_ in plan.engines + plan.scorers + plan.updates}
    sides = {name: _side(layouts[name], side)
             for kind in ("engines", "scorers", "updates") for name, side in result[kind].items()}
    (wide, one), source = DP_PAIR, TP_PAIRS[0].engine
    return {"config": subject_label(subject, size), "world_size": plan.world_size, "sides": sides,
            "pairs": [{"name": str(p), "engine": f"engine {p.engine}", "scorer": scorer_name(p.trainer, p.engine),
                       "applies": p in pairs, "needed": max(p.engine.world_size, p.trainer.world_size)}
                      for p in TP_PAIRS + EXPERT_PAIRS],
            "dp": {"name": f"trainer {wide} vs trainer {one}", "wide": scorer_name(wide, source),
                   "one": scorer_name(one, source), "first_update": f"update {wide}", "update": f"update {one}"},
            "claimed_tp": sorted(load_contract(subject.contract).claims.get("tp_sizes", ())),
            "boundaries": crossing, "workload": dict(WORKLOAD, min_prompt_len=workload.min_prompt_len,
                                                     max_prompt_len=workload.max_prompt_len),
            "contexts": [len(r.prompt) + r.max_new_tokens for r in make_requests(workload, loaded.vocab_size)]}
