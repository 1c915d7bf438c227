"""Gate C01: run-to-run determinism.

Passes when, for every case (engine_prefill, engine_decode, engine_graph, trainer_fwd,
trainer_bwd) of the model's cut, two runs of the same forwards on the same fresh random
tokens, each in its own worker process running beside the other (gates/candidate.py), give bit-identical outputs at
every region call (captured through a RegionDispatch observer, lm_head, logprob and sampler
included; compared by the sha256 of their bytes), every region of the model ran in that case,
no output holds the NaN poison, and some context crossed the contract's key block (and the
SSM chunk where the model has one: gates/boundaries.py; else vacuous); this process, which writes
the verdict, loads no module of the code under test (a condition). Negative control: a contract mapping o_proj to
linear.planted_atomic_split_k (gates/faults.py) fails it; the fast contract passes it on CPU,
since its CPU kernels are deterministic too.

The runs (gates/region_runs.py): engine_prefill, a prefill of three sequences then a chunked
prefill; engine_decode and engine_graph, a prefill then three decode steps (on CPU the graph
binding runs eagerly; capture is C05's); trainer_fwd and trainer_bwd, one packed forward
(gradients are C08's). Poison: the ops allocate their outputs, none writes into a caller's
buffer, so the poison goes where a skipped write would hide, into every uninitialised
allocation: the runs are under torch.use_deterministic_algorithms, which fills torch.empty and
new_empty with NaN (integers: their max), and a NaN in any output fails the gate.
An outside target (gates/target.py), which has no region doors, is judged on its two sides
instead: a workload generated twice by two workers at once, and its tokens scored twice,
equal bit for bit (gates/target_runs.py).
"""
from gates import device
from gates.boundaries import check_crossed
from gates.candidate import ask_together, check_judge_clean, confinement
from gates.inputs import fresh_seed
from gates.target_runs import check_repeats, judge_outside, repeated_runs

CANDIDATE_IN_WORKERS = True  # gates/conftest.py: this module never imports the code under test
TARGET_NEEDS = ()  # an outside target is judged on its generate and score (below)
CASES = ("engine_prefill", "engine_decode", "engine_graph", "trainer_fwd", "trainer_bwd")


def first_difference(first_calls: list, second_calls: list) -> dict | None:
    """Where the second run first left the first: the call (index, region, case, layer) and
    the output that differs, or None."""
    for index, (left, right) in enumerate(zip(first_calls, second_calls)):
        where = {"call_index": index, "region": left["key"][0], "region_case": left["key"][1], "layer": left["key"][2]}
        if left["key"] != right["key"] or len(left["outputs"]) != len(right["outputs"]):
            return dict(where, detail=f"call sequence differs: {left['key']} vs {right['key']}")
        for output, (a, b) in enumerate(zip(left["outputs"], right["outputs"])):
            if a != b:
                return dict(where, output=output, detail="shape/dtype differs" if a["shape"] != b["shape"] or
                            a["dtype"] != b["dtype"] else "bits differ", first=a, second=b)
    if len(first_calls) != len(second_calls):
        return {"call_index": min(len(first_calls), len(second_calls)),
                "detail": "the runs made different numbers of calls"}
    return None


def test_repeated_runs_give_identical_bits(gate):
    model_seed, seeds = fresh_seed() % 1000, {case: fresh_seed() for case in CASES}
    subject = gate.subject()
    if gate.target != "ours":
        return judge_outside(gate, repeated_runs, check_repeats, "every region output repeats bit for bit")
    asked = {"subject": subject, "model_seed": model_seed, "seeds": seeds, "device": device.target()}
    first, second = ask_together(("c01_runs", asked, {"side": "first"}),  # two processes, at once
                                 ("c01_runs", asked, {"side": "second"}))
    gate.inputs = {"config": first["config"], "model_seed": model_seed, "seeds": seeds, "workers": confinement(),
                   "num_decode_steps": 3, "shapes": {case: first["runs"][case]["shapes"] for case in CASES}}
    total = 0
    for case in CASES:
        calls = (first["runs"][case]["calls"], second["runs"][case]["calls"])
        num_outputs = sum(len(call["outputs"]) for call in calls[0])
        total += num_outputs
        found = first_difference(*calls)
        gate.check(f"{case}: every region output repeats bit for bit", found is None,
                   num_region_calls=len(calls[0]), num_outputs_compared=num_outputs,
                   **({"first_difference": found} if found else {}))
        ran = {call["key"][0] for call in calls[0] if call["key"][1] == case}
        missing = sorted(set(first["expected_regions"]) - ran)
        gate.check(f"{case}: every region of the model ran", not missing, missing=missing, num_regions=len(ran))
        poisoned = sum(output["nan"] for run in calls for call in run for output in call["outputs"])
        gate.check(f"{case}: no output holds the NaN poison", poisoned == 0, num_nan=poisoned)
    gate.inputs["num_outputs_compared"] = total
    check_crossed(gate, [start + length for case in CASES for forward in first["runs"][case]["shapes"]
                         for start, length in forward], first["boundaries"])
    check_judge_clean(gate)
    gate.verdict()
