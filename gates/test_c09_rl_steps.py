"""Gate C09: full model & RL steps.

Passes when, on the largest config affordable here (the model's cut on CPU; the full config is
only loaded and validated, its forward is the GPU's business), N = 20 GRPO steps (one
prompt longer than the contract's key block, a group of 2, 8 new tokens, chunked prefill
mixed with decodes) with one update each
give engine log-probs bitwise equal to the trainer's scores (trainer_fwd) and to the update's
own forward (trainer_bwd) at every step, with the weights moving, mixed steps and contexts
past the key block (and the SSM chunk where the model has one) proven; and a
second run saved at step N/2, resumed from disk in another process and stepped once
reproduces the uninterrupted run's step N/2 bit for bit (rewards, engine, trainer and update
log-probs, loss, and the model and fp32 master weights after it) with diff 0 on both sides.
The three runs are workers (gates/rl_runs.py); this process, which writes the verdict,
compares their answers and loads no module of the code under test (a condition).
Negative controls: the fast contract fails the diff conditions, and a resume that restarts
the random stream (gates/faults.py) fails the resume conditions.
"""
from gates import device
from gates.boundaries import check_crossed
from gates.candidate import ask, ask_together, check_judge_clean, confinement
from gates.compare import differing_values, from_int32_bits
from gates.hazards import HazardEvidence
from gates.inputs import fresh_seed
from gates.mismatch import mismatch_stats

CANDIDATE_IN_WORKERS = True  # gates/conftest.py: this module never imports the code under test
NUM_STEPS = 20
SIDES = {"trainer_logprobs": "trainer_fwd (scores)", "update_logprobs": "trainer_bwd (the update's forward)"}


def _same_step(a: dict, b: dict) -> dict:
    """{what: number of differing values} between two step records (the loss by its bits)."""
    return {"rewards": sum(x != y for x, y in zip(a["rewards"], b["rewards"])),
            **{side: differing_values(a[side], b[side]) for side in ("engine_logprobs", *SIDES)},
            "loss": int(a["loss_bits"] != b["loss_bits"])}


def _diff_figures(records, side: str) -> dict:
    """Engine vs one trainer side over all steps: the steps that differ, the mismatch figures,
    and max |dp| of each step (the report plots it over the steps)."""
    differing = [r["step"] for r in records if differing_values(r["engine_logprobs"], r[side])]
    stats = mismatch_stats([lp for r in records for lp in from_int32_bits(r["engine_logprobs"])],
                           [lp for r in records for lp in from_int32_bits(r[side])])
    per_step = [mismatch_stats(from_int32_bits(r["engine_logprobs"]), from_int32_bits(r[side]))["max_abs_dp"]
                for r in records]
    return {"steps_differing": differing, "num_steps": len(records), "per_step_max_abs_dp": per_step, **stats}


def test_grpo_steps_and_resume(gate, tmp_path):
    num_steps, seed = NUM_STEPS, fresh_seed()
    half = num_steps // 2
    subject = gate.subject()
    common = {"subject": subject, "model_seed": seed % 1000, "seed": seed, "device": device.target()}
    saves = tmp_path / "saves"  # the worker's checkpoint stages beside its target, then renames
    saves.mkdir()
    saved = saves / "checkpoint"
    run, second = ask_together(("c09_steps", dict(common, num_steps=num_steps, full_config=not gate.checkpoint),
                                {"side": "run"}),
                               ("c09_steps", dict(common, num_steps=half, save_to=str(saved)),
                                {"writable": [saves], "side": "interrupted"}))
    resumed = ask("c09_steps", dict(common, resume_from=str(saved)), side="resumed")
    records = run["records"]
    gate.inputs = {"seed": seed, "config": run["config"], "num_steps": num_steps, "save_after_steps": half,
                   "settings": run["settings"], "workers": confinement()}
    if "full_config" in run:
        full = run["full_config"]
        gate.check(f"full config {full['config']} loads and validates (the cut runs on CPU)", "error" not in full,
                   **full)
    for side, name in SIDES.items():
        figures = _diff_figures(records, side)
        gate.check(f"engine == {name} log-probs, bitwise, every step", not figures["steps_differing"], **figures)
    weights = [{k: v for k, v in state.items() if k.startswith("model.")} for state in run["states"]]
    hazards = {"steps whose update moved the weights": sum(a != b for a, b in zip(weights, weights[1:])) + 1,
               "mixed prefill/decode engine steps": run["mixed_steps"]}
    evidence = HazardEvidence()
    for name, count in hazards.items():
        evidence.add(name, count)
    gate.check("the weights moved and prefill mixed with decodes", all(hazards.values()), **hazards)
    check_crossed(gate, run["contexts"], run["boundaries"])
    rerun_differences = [_same_step(a, b) for a, b in zip(records, second["records"])]
    gate.check(f"the second run's steps 0..{half - 1}, before its save, equal the uninterrupted run's",
               len(second["records"]) == half and not any(any(d.values()) for d in rerun_differences),
               differences=rerun_differences)
    after_resume = resumed["records"][0]
    resumed_differences = _same_step(records[half], after_resume)
    gate.check(f"the first step after resume equals the uninterrupted step {half} bitwise",
               not any(resumed_differences.values()), **resumed_differences)
    expected, state = run["states"][half], resumed["states"][0]
    differing = sorted(k for k in expected.keys() | state.keys() if expected.get(k) != state.get(k))
    gate.check("model and fp32 master weights after the resumed step equal the uninterrupted run's",
               not differing, tensors_differing=differing, num_tensors=len(state))
    after = _diff_figures([after_resume], "trainer_logprobs"), _diff_figures([after_resume], "update_logprobs")
    gate.check("after resume: engine == trainer and update log-probs, bitwise",
               not (after[0]["steps_differing"] or after[1]["steps_differing"]),
               trainer=after[0], update=after[1])
    check_judge_clean(gate)
    evidence.require(*hazards)
    gate.verdict()
