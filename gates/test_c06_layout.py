"""Gate C06: layout consistency.

Passes when, on the model at the asked size (--size; the cut by default), with every side in
its own TP/EP/DP layout on torch.distributed (gloo over loopback on the CPU, NCCL with one GPU
per rank under --device cuda), the rollout and the trainer give identical bits: the per-token
log-probs of engine TP2 equal trainer TP1's and TP4's scores of the same tokens and, on models
with routed experts, engine EP2's equal trainer EP4's and EP1's and engine TP2's equal trainer
TP2 EP2's; trainer DP2's scores and one GRPO update's reduced gradients equal trainer DP1's;
every multi-rank layout ran its collectives, all sides report the same comm backend and
transport, and every TP size the contract claims (claims: tp_sizes) that fits the ranks here
was run; every context (prompt + new tokens) runs past the contract's key block, so the
layouts meet attention on both sides of it (and the SSM chunk where the model has one:
gates/boundaries.py; else vacuous). A pair needing more GPUs than the machine has is n/a,
with the count.
The layouts run in one worker (gates/layout_plan.py: its ranks its own processes, talking over
its namespace's loopback alone); this process compares what the worker hands back (log-prob
bits; the updates' reduced gradients as per-parameter digests) and writes the verdict, and
loads no module of the code under test (a condition).
Negative control: layouts that reduce in rank order (the fast contract, or the consistent
regions with the fast layout arithmetic) fail it (tests/gates/test_gate_c06.py).
"""
import torch

from gates import device
from gates.boundaries import check_crossed
from gates.candidate import ask, check_judge_clean, confinement
from gates.compare import bit_figures, from_int32_bits
from gates.inputs import fresh_seed

CANDIDATE_IN_WORKERS = True  # gates/conftest.py: this module never imports the code under test
CPU_RANKS = 4
"""gloo ranks are processes: every pair fits on the CPU."""


def transport() -> tuple:
    """(backend, ranks available, how the ranks talk) for the selected device."""
    if device.target() == "cuda":
        return "nccl", torch.cuda.device_count(), "NCCL, one process per GPU"
    return "gloo", CPU_RANKS, "gloo over loopback, one process per rank"


def check_figures(gate, name: str, figures: dict, same_count: bool = True) -> None:
    """A bit condition from bit_figures: something compared (nothing compared proves nothing),
    nothing differs."""
    gate.check(name, same_count and figures["num_compared"] > 0 and figures["num_differing"] == 0, **figures)


def check_pair(gate, name: str, left: list, right: list) -> None:
    """Two sides' per-token log-probs (int32 bit lists per sequence) bit for bit."""
    figures = bit_figures(from_int32_bits(left), from_int32_bits(right), [f"sequence {i}" for i in range(len(left))])
    check_figures(gate, name, figures, same_count=len(left) == len(right))


def check_gradients(gate, name: str, first: dict, other: dict) -> None:
    """The updates' reduced gradients: every parameter's digest equal to the first update's
    (the worker's bit figures recorded beside them)."""
    mine, theirs = first["gradient_digests"] or {}, other["gradient_digests"] or {}
    differing = sorted(n for n in set(mine) | set(theirs) if mine.get(n) != theirs.get(n))
    gate.check(name, bool(mine) and not differing, num_parameters=len(mine), differing_parameters=differing[:10],
               **(other["gradients_vs_first"] or {"num_compared": 0}))


def check_sides(gate, answer: dict, ranks: int) -> None:
    """The conditions besides the bit pairs: collectives ran, one transport, TP claims run."""
    sides = answer["sides"]
    silent = sorted(name for name, side in sides.items() if side["world_size"] > 1 and not side["calls"])
    gate.check("every multi-rank layout exchanged data through its collectives", not silent,
               silent=silent, calls={name: side["calls"] for name, side in sides.items()})
    fingerprints = {name: side["comm"] for name, side in sides.items()}
    first = next(iter(fingerprints.values()))
    gate.check("engine and trainer report the same comm backend and transport",
               all(f == first for f in fingerprints.values()), fingerprints=fingerprints)
    claimed = set(answer["claimed_tp"])
    fits = {size for size in claimed if size <= ranks}
    ran = {side["tp"] for side in sides.values()}
    gate.check("every TP size the contract claims (claims: tp_sizes) that fits here was run", fits <= ran,
               claimed=sorted(claimed), ran=sorted(ran), ranks=ranks)
    if claimed - fits:
        gate.check_n_a(f"claimed TP sizes {sorted(claimed - fits)} run",
                       f"they need more than the {ranks} ranks this machine has")


def test_layouts_give_identical_bits(gate):
    backend, ranks, how = transport()
    if ranks < 2:
        gate.n_a(f"{backend}: a layout needs at least 2 ranks, this machine has {ranks} GPU(s)")
    seed = fresh_seed()
    answer = ask("c06_layouts", {"subject": gate.subject(gate.size), "device": device.target(), "seed": seed,
                                 "backend": backend, "ranks": ranks}, loopback=True)
    sides = answer["sides"]
    gate.inputs = {"seed": seed, "config": answer["config"], "world_size": answer["world_size"],
                   "sides": sorted(sides), "transport": how, "ranks_available": ranks, "workers": confinement(),
                   "workload": answer["workload"]}
    check_crossed(gate, answer["contexts"], answer["boundaries"])
    for pair in answer["pairs"]:
        name = f"{pair['name']}: per-token log-probs bitwise equal"
        if not pair["applies"]:
            gate.check_n_a(name, f"{answer['config']} has no routed experts to split")
        elif pair["needed"] > ranks:
            gate.check_n_a(name, f"needs {pair['needed']} ranks ({backend}), this machine has {ranks}")
        else:
            check_pair(gate, name, sides[pair["engine"]]["logprobs"], sides[pair["scorer"]]["logprobs"])
    dp = answer["dp"]
    check_pair(gate, f"{dp['name']}: per-token log-probs bitwise equal", sides[dp["wide"]]["logprobs"],
               sides[dp["one"]]["logprobs"])
    check_gradients(gate, f"{dp['name']}: one GRPO update's reduced gradients bitwise equal",
                    sides[dp["first_update"]], sides[dp["update"]])
    check_sides(gate, answer, ranks)
    check_judge_clean(gate)
    gate.verdict()
