"""Gate C06: layout consistency.

Passes when, on the model's cut, with every side in its own TP/EP/DP layout on
torch.distributed (gloo over loopback, several processes), the rollout and the trainer give
identical bits: the per-token log-probs of engine TP2 equal trainer TP1's and TP4's scores of
the same tokens and, on models with routed experts, engine EP2's equal trainer EP4's and
engine TP2's equal trainer TP2 EP2's; trainer DP2's scores and one GRPO update's reduced
gradients equal trainer DP1's; every multi-rank layout ran its collectives, all sides report
the same comm backend and transport, and every TP size the contract claims (claims:
tp_sizes) was run here. Negative control: layouts that reduce in rank order (the fast
contract, or the consistent regions with the fast layout arithmetic) fail it
(tests/test_gate_c06.py).
"""
from gates import device
from gates.compare import first_bit_difference
from gates.inputs import fresh_seed
from gates.layout_sides import SidesPlan, preload_for_fork, run_sides
from gates.workload import EngineShape, Workload
from kernels.contract import load_contract
from kernels.layout.launch import run_processes
from kernels.layout.layout import Layout, SideLayouts
from kernels.models.config import load_model_config
from kernels.models.registry import config_name

TP_PAIRS = (SideLayouts(Layout(tp=2), Layout(tp=1)), SideLayouts(Layout(tp=2), Layout(tp=4)))
EXPERT_PAIRS = (SideLayouts(Layout(ep=2), Layout(ep=4)), SideLayouts(Layout(tp=2), Layout(tp=2, ep=2)))
DP_PAIR = (Layout(dp=2), Layout(dp=1))
WORKLOAD = dict(num_sequences=8, new_tokens=12, min_prompt_len=6, max_prompt_len=24, arrival_spread=4)


def model_pairs(model: str) -> tuple:
    """The engine/trainer layout pairs this model can run (EP needs routed experts)."""
    config = load_model_config(config_name(model, "cut"))
    return TP_PAIRS + (EXPERT_PAIRS if "moe" in getattr(config, "block_types", ()) else ())


def make_plan(model: str, contract: str, seed: int) -> SidesPlan:
    """Engine runs, trainer scorings and updates for the pairs this model can run."""
    pairs = model_pairs(model)
    engines = tuple({f"engine {p.engine}": p.engine for p in pairs}.items())
    source = f"engine {TP_PAIRS[0].engine}"
    scorers = {f"trainer {p.trainer}": (p.trainer, f"engine {p.engine}") for p in pairs}
    scorers.update({f"trainer {layout}": (layout, source) for layout in DP_PAIR})
    updates = tuple((f"update {layout}", layout, source) for layout in DP_PAIR)
    return SidesPlan(config_name(model, "cut"), contract, seed, Workload(seed=seed, **WORKLOAD),
                     EngineShape(tokens_per_step=24, max_running=8), engines,
                     tuple((name, layout, src) for name, (layout, src) in scorers.items()), updates)


def bit_figures(left: list, right: list, labels: list) -> dict:
    """Elements compared, how many differ, and the first difference (with its label)."""
    differences = [first_bit_difference(a, b) for a, b in zip(left, right)]
    first = next((f"{label}: {d}" for label, d in zip(labels, differences) if d is not None), None)
    return {"num_compared": sum(t.numel() for t in left),
            "num_differing": sum(d.num_differing for d in differences if d), "first_difference": first}


def check_pair(gate, name: str, left: list, right: list, labels=None) -> None:
    figures = bit_figures(left, right, labels or [f"sequence {i}" for i in range(len(left))])
    compared = len(left) == len(right) and figures["num_compared"] > 0  # nothing compared proves nothing
    gate.check(name, compared and figures["num_differing"] == 0, **figures)


def check_sides(gate, plan: SidesPlan, result: dict, contract) -> None:
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
    ran = {layout.tp for name, layout in layouts.items() if name in sides}
    gate.check("every TP size the contract claims (claims: tp_sizes) was run here", claimed <= ran,
               claimed=sorted(claimed), ran=sorted(ran))


def test_layouts_give_identical_bits(gate):
    if device.target() != "cpu":
        gate.n_a("the layouts run on CPU with gloo here; multi-GPU (NCCL) layouts are their own issue")
    seed = fresh_seed()
    plan = make_plan(gate.model, gate.contract, seed)
    gate.inputs = {"seed": seed, "config": plan.config, "world_size": plan.world_size, "workload": WORKLOAD,
                   "engines": [n for n, _ in plan.engines], "scorers": [n for n, *_ in plan.scorers],
                   "updates": [n for n, *_ in plan.updates], "transport": "gloo over loopback, one process per rank"}
    preload_for_fork()
    result = run_processes(run_sides, plan.world_size, plan)
    engines, scorers, updates = result["engines"], result["scorers"], result["updates"]
    for pair in TP_PAIRS + EXPERT_PAIRS:
        name = f"{pair}: per-token log-probs bitwise equal"
        if pair not in model_pairs(gate.model):
            gate.check_n_a(name, f"{plan.config} has no routed experts to split")
            continue
        check_pair(gate, name, engines[f"engine {pair.engine}"]["logprobs"],
                   scorers[f"trainer {pair.trainer}"]["logprobs"])
    wide, one = (f"{layout}" for layout in DP_PAIR)
    check_pair(gate, f"trainer {wide} vs trainer {one}: per-token log-probs bitwise equal",
               scorers[f"trainer {wide}"]["logprobs"], scorers[f"trainer {one}"]["logprobs"])
    names = sorted(updates[f"update {one}"]["gradients"])
    check_pair(gate, f"trainer {wide} vs trainer {one}: one GRPO update's reduced gradients bitwise equal",
               [updates[f"update {wide}"]["gradients"][n] for n in names],
               [updates[f"update {one}"]["gradients"][n] for n in names], names)
    check_sides(gate, plan, result, load_contract(gate.contract))
    gate.verdict()
