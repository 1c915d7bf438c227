"""Gate C09: full model & RL steps.

Passes when, on the largest config affordable here (the model's cut on CPU; the full config is
only loaded and validated, its forward is the GPU's business), N = 20 GRPO steps (one
prompt, a group of 2, 8 new tokens, chunked prefill mixed with decodes) with one update each
give engine log-probs bitwise equal to the trainer's scores (trainer_fwd) and to the update's
own forward (trainer_bwd) at every step, with the weights moving and mixed steps proven; and a
second run saved at step N/2, resumed from disk and stepped once reproduces the uninterrupted run's step
N/2 bit for bit (rewards, engine, trainer and update log-probs, loss, and the model and fp32
master weights after it) with diff 0 on both sides. Negative control: the fast contract fails
the diff conditions.
"""
import dataclasses
import struct


from gates import device
from gates.compare import bit_view, first_bit_difference
from gates.hazards import HazardEvidence
from gates.inputs import fresh_seed
from gates.mismatch import mismatch_stats
from gates.subject import subject_config, subject_label, subject_weights
from kernels.contract import load_contract
from kernels.models.config import load_model_config
from kernels.models.registry import config_name
from kernels.trainer.rl_loop import GRPORun, GRPOSettings

NUM_STEPS = 20
SIDES = {"trainer_logprobs": "trainer_fwd (scores)", "update_logprobs": "trainer_bwd (the update's forward)"}


def _settings(seed: int) -> GRPOSettings:
    return GRPOSettings(prompts_per_step=1, group_size=2, max_new_tokens=8, min_prompt_len=4,
                        max_prompt_len=12, seed=seed, max_arrival_offset=3, engine_tokens_per_step=8)


def _state(run) -> dict:
    """Model weights and fp32 master weights, cloned."""
    state = {f"model.{k}": v.clone() for k, v in run.trainer.weights().items()}
    state.update({f"master.{k}": v.detach().clone() for k, v in run.trainer.optimizer.master.items()})
    return state


def _differing_tokens(left, right) -> int:
    return sum(int((bit_view(a) != bit_view(b)).sum()) for a, b in zip(left, right))


def _same_step(a, b) -> dict:
    """{what: number of differing values} between two StepRecords."""
    return {"rewards": sum(x != y for x, y in zip(a.rewards, b.rewards)),
            "engine_logprobs": _differing_tokens(a.engine_logprobs, b.engine_logprobs),
            "trainer_logprobs": _differing_tokens(a.trainer_logprobs, b.trainer_logprobs),
            "update_logprobs": _differing_tokens(a.update_logprobs, b.update_logprobs),
            "loss": int(struct.pack("<d", a.loss) != struct.pack("<d", b.loss))}


def _diff_figures(records, side: str) -> dict:
    """Engine vs one trainer side over all steps: the steps that differ, the mismatch figures,
    and max |dp| of each step (the report plots it over the steps)."""
    differing = [r.step for r in records if _differing_tokens(r.engine_logprobs, getattr(r, side))]
    stats = mismatch_stats([lp for r in records for lp in r.engine_logprobs],
                           [lp for r in records for lp in getattr(r, side)])
    per_step = [mismatch_stats(r.engine_logprobs, getattr(r, side))["max_abs_dp"] for r in records]
    return {"steps_differing": differing, "num_steps": len(records), "per_step_max_abs_dp": per_step, **stats}


def _run(config, contract, settings, weights, num_steps, half):
    """The uninterrupted run: its records, the state after step `half`, its hazard counts."""
    run = GRPORun(config, contract, settings, weights=weights, device=device.target())
    records, state_after_half, moved = [], None, 0
    before = _state(run)
    for step in range(num_steps):
        records.append(run.step())
        after = _state(run)
        moved += any(first_bit_difference(after[k], before[k]) for k in after if k.startswith("model."))
        state_after_half = after if step == half else state_after_half
        before = after
    mixed = run.engine.step_phases[("decode", "prefill")]
    return records, state_after_half, {"steps whose update moved the weights": moved,
                                       "mixed prefill/decode engine steps": mixed}


def _save_and_resume(config, contract, settings, weights, half, directory):
    """A second run: `half` steps, save, resume from disk, one step; returns its records before
    the save, the resumed step's record and the state after that step."""
    second = GRPORun(config, contract, settings, weights=weights, device=device.target())
    rerun = [second.step() for _ in range(half)]
    second.save(directory)
    resumed = GRPORun.resume(directory, config, contract, settings, device=device.target())
    return rerun, resumed.step(), _state(resumed)


def _check_full_config(gate):
    if gate.checkpoint:  # the run is on a checkpoint, not on a cut of a shipped config
        return
    name = config_name(gate.model, "full")
    try:
        full = load_model_config(name)
        figures = {"num_layers": full.num_layers, "hidden_size": full.hidden_size, "vocab_size": full.vocab_size}
    except ValueError as error:
        figures = {"error": str(error)}
    gate.check(f"full config {name} loads and validates (the cut runs on CPU)", "error" not in figures, **figures)


def test_grpo_steps_and_resume(gate, tmp_path):
    num_steps, seed = NUM_STEPS, fresh_seed()
    half = num_steps // 2
    config = subject_config(gate)
    weights = subject_weights(gate, config, seed % 1000)
    contract, settings = load_contract(gate.contract), _settings(seed)
    gate.inputs = {"seed": seed, "config": subject_label(gate), "num_steps": num_steps,
                   "save_after_steps": half, "settings": dataclasses.asdict(settings)}
    records, state_after_half, hazards = _run(config, contract, settings, weights, num_steps, half)
    rerun, after_resume, resumed_state = _save_and_resume(config, contract, settings, weights, half,
                                                          tmp_path / "checkpoint")
    _check_full_config(gate)
    for side, name in SIDES.items():
        figures = _diff_figures(records, side)
        gate.check(f"engine == {name} log-probs, bitwise, every step", not figures["steps_differing"], **figures)
    evidence = HazardEvidence()
    for name, count in hazards.items():
        evidence.add(name, count)
    gate.check("the weights moved and prefill mixed with decodes", all(hazards.values()), **hazards)
    rerun_differences = [_same_step(a, b) for a, b in zip(records, rerun)]
    gate.check(f"the second run's steps 0..{half - 1}, before its save, equal the uninterrupted run's",
               not any(any(d.values()) for d in rerun_differences), differences=rerun_differences)
    resumed_differences = _same_step(records[half], after_resume)
    gate.check(f"the first step after resume equals the uninterrupted step {half} bitwise",
               not any(resumed_differences.values()), **resumed_differences)
    differing = [k for k in resumed_state if first_bit_difference(resumed_state[k], state_after_half[k])]
    gate.check("model and fp32 master weights after the resumed step equal the uninterrupted run's",
               not differing, tensors_differing=differing, num_tensors=len(resumed_state))
    after = _diff_figures([after_resume], "trainer_logprobs"), _diff_figures([after_resume], "update_logprobs")
    gate.check("after resume: engine == trainer and update log-probs, bitwise",
               not (after[0]["steps_differing"] or after[1]["steps_differing"]),
               trainer=after[0], update=after[1])
    evidence.require(*hazards)
    gate.verdict()
