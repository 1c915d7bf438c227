"""C09's runs, as its workers compute them (gates/candidate.py): GRPO steps of the rollout
engine and the trainer on the seeded cut, each step's record reduced to what the judge
compares (rewards as floats, which JSON carries exactly; losses as float64 bit patterns, so a
NaN loss compares as itself; log-probs as int32 bit patterns) and the model and fp32 master
weights as sha256 digests. The uninterrupted run, the run saved at its midpoint and its
resumption from disk are three workers: a resume that depended on anything but the files on
disk would not reproduce.
"""
import struct

from gates import device
from gates.compare import int32_bits, tensor_digest
from kernels.models.config import load_model_config
from kernels.models.registry import config_name
from kernels.trainer.rl_loop import GRPORun, GRPOSettings, prompt_tokens


def settings(seed: int, key_block: int) -> GRPOSettings:
    """Every prompt longer than the contract's key block: each step's prefill and decodes run
    attention past it (gates/boundaries.py)."""
    return GRPOSettings(prompts_per_step=1, group_size=2, max_new_tokens=8, min_prompt_len=key_block + 1,
                        max_prompt_len=key_block + 9, seed=seed, max_arrival_offset=3, engine_tokens_per_step=8)


def prompt_lengths(run) -> list:
    """The lengths of the prompts the run's next step samples, one per completion."""
    s = run.settings
    return [len(prompt_tokens(s.seed, run.data_position + p, run.config.vocab_size, s.min_prompt_len,
                              s.max_prompt_len)) for p in range(s.prompts_per_step) for _ in range(s.group_size)]


def record(step) -> dict:
    """One StepRecord as JSON data."""
    return {"step": step.step, "rewards": [float(r) for r in step.rewards], "loss": float(step.loss),
            "loss_bits": struct.unpack("<q", struct.pack("<d", float(step.loss)))[0],  # a NaN's too
            **{side: [int32_bits(t) for t in getattr(step, side)]
               for side in ("engine_logprobs", "trainer_logprobs", "update_logprobs")}}


def state_digests(run) -> dict:
    """sha256 of every model weight and fp32 master weight (named model.* and master.*)."""
    tensors = {**{f"model.{k}": v for k, v in run.trainer.weights().items()},
               **{f"master.{k}": v for k, v in run.trainer.optimizer.master.items()}}
    return {name: tensor_digest(t) for name, t in tensors.items()}


def steps(config, contract, weights, seed: int, key_block: int, num_steps: int, *, save_to=None) -> dict:
    """`num_steps` steps of a fresh run: {records, states (after each step), mixed_steps,
    contexts (prompt + completion of every sequence)}; the run saved into `save_to` after them
    when given."""
    run = GRPORun(config, contract, settings(seed, key_block), weights=weights, device=device.target())
    records, states, contexts = [], [], []
    for _ in range(num_steps):
        lengths, step = prompt_lengths(run), run.step()
        contexts += [length + len(logprobs) for length, logprobs in zip(lengths, step.engine_logprobs)]
        records.append(record(step))
        states.append(state_digests(run))
    if save_to is not None:
        run.save(save_to)
    return {"records": records, "states": states, "mixed_steps": run.engine.step_phases[("decode", "prefill")],
            "contexts": contexts}


def resumed_step(config, contract, seed: int, key_block: int, directory) -> dict:
    """The run saved in `directory`, resumed and stepped once: {records: [its step], states}."""
    run = GRPORun.resume(directory, config, contract, settings(seed, key_block), device=device.target())
    return {"records": [record(run.step())], "states": [state_digests(run)]}


def full_config(model: str) -> dict:
    """The family's full config loaded and validated: its sizes, or the error."""
    name = config_name(model, "full")
    try:
        full = load_model_config(name)
    except ValueError as error:
        return {"config": name, "error": str(error)}
    return {"config": name, "num_layers": full.num_layers, "hidden_size": full.hidden_size,
            "vocab_size": full.vocab_size}
