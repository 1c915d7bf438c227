"""What the gates ask of an outside target (gates/target.py) and how they compare it: a
workload generated twice in two workers at once, its tokens and log-prob bits compared as
integers, and the same tokens scored twice. Used by C01 where a target offers no region doors.
"""
from gates import device
from gates.candidate import ask_together


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


def repeated_runs(subject: dict, workload: dict) -> tuple:
    """(engine runs, trainer runs): each side asked twice, both workers at once."""
    common = {"subject": subject, "device": device.target()}
    engine = ask_together(*[("rollout_bits", dict(common, workload=workload), {"side": "engine"})] * 2)
    sequences = [{k: c[k] for k in ("prompt", "tokens", "temperature")} for c in engine[0]["completions"]]
    trainer = ask_together(*[("trainer_bits", dict(common, sequences=sequences), {"side": "trainer"})] * 2)
    return engine, trainer


def check_repeats(gate, engine: list, trainer: list) -> None:
    """C01's conditions on an outside target's two runs of each side."""
    found = first_differing_sequence(engine[0]["completions"], engine[1]["completions"])
    tokens = sum(len(c["tokens"]) for c in engine[0]["completions"])
    gate.check("engine side: two runs give the same tokens and log-prob bits", found is None,
               num_tokens_compared=tokens, **({"first_difference": found} if found else {}))
    same = trainer[0]["bits"] == trainer[1]["bits"]
    gate.check("trainer side: two scorings of the same tokens give the same bits", same,
               num_tokens_compared=sum(len(bits) for bits in trainer[0]["bits"]))
