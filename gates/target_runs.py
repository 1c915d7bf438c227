"""What the gates ask of an outside target (gates/target.py) and how they compare it: a
workload generated twice in two workers at once, its tokens and log-prob bits compared as
integers, and the same tokens scored twice. Used by C01, C02 and C03 where a target offers no region doors.
"""
import random

from gates import device
from gates.candidate import ask, ask_together, check_judge_clean, confinement
from gates.inputs import fresh_seed


def as_sequences(completions: list) -> list:
    """What a trainer side scores of completions [{prompt, tokens, temperature, bits}]."""
    return [{k: c[k] for k in ("prompt", "tokens", "temperature")} for c in completions]


def first_differing_sequence(first: list, second: list) -> dict | None:
    """Where two runs' completions [{prompt, tokens, bits}] first differ, or None."""
    if len(first) != len(second):
        return {"detail": f"{len(first)} completions vs {len(second)}"}
    for index, (a, b) in enumerate(zip(first, second)):
        for field in ("prompt", "tokens", "bits"):
            if a[field] != b[field]:
                at = next((i for i, (x, y) in enumerate(zip(a[field], b[field])) if x != y), None)
                return {"sequence": index, "field": field, "position": at}
    return None


def repeated_runs(subject: dict, seed: int) -> tuple:
    """(engine runs, trainer runs) of a seeded workload: each side asked twice, both workers at once."""
    workload = {"num_sequences": 16, "new_tokens": 16, "seed": seed}
    common = {"subject": subject, "device": device.target()}
    engine = ask_together(*[("rollout_bits", dict(common, workload=workload), {"side": "engine"})] * 2)
    sequences = as_sequences(engine[0]["completions"])
    trainer = ask_together(*[("trainer_bits", dict(common, sequences=sequences), {"side": "trainer"})] * 2)
    return engine, trainer


def check_repeats(gate, runs: tuple) -> None:
    """C01's conditions on an outside target's two runs of each side."""
    engine, trainer = runs
    found = first_differing_sequence(engine[0]["completions"], engine[1]["completions"])
    tokens = sum(len(c["tokens"]) for c in engine[0]["completions"])
    gate.check("engine side: two runs give the same tokens and log-prob bits", found is None,
               num_tokens_compared=tokens, **({"first_difference": found} if found else {}))
    same = trainer[0]["bits"] == trainer[1]["bits"]
    gate.check("trainer side: two scorings of the same tokens give the same bits", same,
               num_tokens_compared=sum(len(bits) for bits in trainer[0]["bits"]))


BATCHES = (2, 8, 16)
"""C02 on an outside target: every prompt alone, then the first 2, 8 and 16 in a random order."""


PROMPT_TOKENS = 256
"""Prompts draw token ids below this: valid in any vocabulary the judge has not seen."""


def _prompt(rng) -> list:
    return [rng.randrange(1, PROMPT_TOKENS) for _ in range(rng.randint(4, 40))]


def _runs(argument: str, items: list, orders: dict) -> list:
    """The items one per call, then in each batch's order (a worker's `runs`)."""
    return [{argument: items, "alone": True}] + [{argument: [items[i] for i in order], "alone": False}
                                                  for order in orders.values()]


def batch_runs(subject: dict, seed: int, new_tokens: int = 8) -> dict:
    """max(BATCHES) random prompts, each a probe: their greedy completions one per call and
    in batches of the first `size` prompts shuffled; the alone completions' sequences scored
    one per call and in the same batches. {orders, engine, trainer: {"alone"|size: [...]}};
    orders[size] lists prompt indices in the batch's order."""
    rng = random.Random(seed)
    prompts = [_prompt(rng) for _ in range(max(BATCHES))]
    orders = {size: rng.sample(range(size), size) for size in BATCHES}
    common = {"subject": subject, "device": device.target(), "new_tokens": new_tokens}
    engine = ask("prompt_runs", dict(common, runs=_runs("prompts", prompts, orders)), side="engine")["runs"]
    sequences = as_sequences(engine[0])
    trainer = ask("score_runs", dict(common, runs=_runs("sequences", sequences, orders)), side="trainer")["runs"]
    labels = ["alone", *orders]
    return {"orders": orders, "engine": dict(zip(labels, engine)), "trainer": dict(zip(labels, trainer))}


def moved_probes(runs: dict, side: str) -> dict:
    """{size: [prompt indices whose bits in that batch differ from alone]} on one side."""
    alone = runs[side]["alone"]
    return {size: [i for place, i in enumerate(order) if runs[side][size][place] != alone[i]]
            for size, order in runs["orders"].items()}


def check_batches(gate, runs: dict) -> None:
    """C02's conditions on an outside target: every probe's bits alone == in every batch."""
    compared = sum(len(order) for order in runs["orders"].values())
    engine, trainer = moved_probes(runs, "engine"), moved_probes(runs, "trainer")
    gate.check(f"engine side: every prompt's greedy tokens and log-prob bits equal alone and among {BATCHES} "
               "prompts", not any(engine.values()), moved=engine, placements_compared=compared,
               num_tokens=sum(len(c["tokens"]) for c in runs["engine"]["alone"]), orders=runs["orders"])
    gate.check(f"trainer side: every sequence's scored bits equal alone and among {BATCHES} sequences",
               not any(trainer.values()), moved=trainer, placements_compared=compared,
               num_tokens=sum(len(bits) for bits in runs["trainer"]["alone"]))


PHASE_PROBES = 4
"""C03 on an outside target: this many probes, each decoded alone and re-prefilled at 3 cuts."""


def phase_runs(subject: dict, seed: int, new_tokens: int = 12, cuts: int = 3) -> dict:
    """PHASE_PROBES probes' greedy decodes, then at `cuts` random points k of each the prompt
    plus its first k tokens prefilled anew for one token: {probes: [{decoded, prefilled: {k: completion}}]}."""
    rng = random.Random(seed)
    probes = [{"prompt": _prompt(rng), "cuts": sorted(rng.sample(range(1, new_tokens), cuts))}
              for _ in range(PHASE_PROBES)]
    asked = {"subject": subject, "device": device.target(), "probes": probes, "new_tokens": new_tokens}
    answer = ask("decode_and_prefill", asked, side="engine")["probes"]
    return {"probes": [{"decoded": a["decoded"], "prefilled": {int(k): c for k, c in a["prefilled"].items()}}
                       for a in answer]}


def check_phases(gate, runs: dict) -> None:
    """C03's condition on an outside target: token k decoded == token k of a fresh prefill."""
    moved = [[index, k] for index, probe in enumerate(runs["probes"]) for k, fresh in probe["prefilled"].items()
             if (fresh["tokens"][0], fresh["bits"][0]) != (probe["decoded"]["tokens"][k], probe["decoded"]["bits"][k])]
    gate.check("engine side: each decoded token and its log-prob bits equal a fresh prefill of the prompt and "
               "the tokens before it", not moved, cuts=[sorted(probe["prefilled"]) for probe in runs["probes"]],
               differing_cuts=moved, num_tokens_compared=sum(len(probe["prefilled"]) for probe in runs["probes"]))


def judge_outside(gate, runs, check, region_condition: str) -> None:
    """A gate on an outside target, whole: `runs(subject, seed)` under a fresh seed, `check`
    its conditions, the region-level condition it cannot check n/a with the reason, the
    judge's process checked clean, the verdict."""
    seed = fresh_seed()
    gate.inputs = {"seed": seed, "workers": confinement()}
    check(gate, runs(gate.subject(), seed))
    gate.check_n_a(region_condition, f"target {gate.target} has no region doors")
    check_judge_clean(gate)
    gate.verdict()
