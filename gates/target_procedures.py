"""The worker side of an outside target (gates/target.py): the procedures C01, C02, C03 and C07
ask when the subject names a target other than ours, answering as gates/procedures.py does
(token ids, fp32 log-probs as int32 bit patterns), on the engine's or the trainer's threads.
"""
from functools import partial

import torch

from gates.case_calls import side_threads
from gates.compare import int32_bits
from gates.target import Sample, target_class
from gates.workload import Workload


def outside_target_named(arguments: dict) -> bool:
    return arguments.get("subject", {}).get("target", "ours") != "ours"


def _target(arguments: dict):
    subject = arguments["subject"]
    return target_class(subject["target"])(subject["checkpoint"])


def _completions(samples) -> list:
    return [{"prompt": list(s.prompt), "tokens": list(s.tokens), "temperature": s.temperature,
             "bits": int32_bits(s.logprobs)} for s in samples]


def outside_rollout_bits(arguments: dict) -> dict:
    """rollout_bits' answer for an outside target: no engine steps and no boundaries (None)."""
    target = _target(arguments)
    with side_threads("engine"):
        samples, threads = target.generate(Workload(**arguments["workload"])), torch.get_num_threads()
    return {"completions": _completions(samples), "mixed_steps": None, "threads": threads, "boundaries": None,
            "config": f"{target.name} {arguments['subject']['checkpoint']}"}


def _together_or_alone(call, items: list, alone: bool) -> list:
    """call(items) once, or with `alone` once per item: [one answer per item]."""
    return [answer for item in items for answer in call([item])] if alone else list(call(items))


def outside_trainer_bits(arguments: dict) -> dict:
    """trainer_bits' answer for an outside target: its score of `sequences`, submitted
    together or, with `alone`, one sequence per call."""
    target = _target(arguments)
    samples = [Sample(tuple(s["prompt"]), tuple(s["tokens"]), None, s["temperature"]) for s in arguments["sequences"]]
    with side_threads("trainer"):
        scores = _together_or_alone(target.score, samples, arguments.get("alone", False))
        return {"bits": [int32_bits(s) for s in scores], "threads": torch.get_num_threads()}


def prompt_bits(arguments: dict) -> dict:
    """An outside target's greedy completions of `prompts`, submitted together or, with
    `alone`, one prompt per call: {completions: [{prompt, tokens, temperature, bits}], threads}."""
    target = _target(arguments)
    with side_threads("engine"):
        generate = partial(target.generate_prompts, new_tokens=arguments["new_tokens"])
        samples = _together_or_alone(generate, [tuple(p) for p in arguments["prompts"]], arguments.get("alone", False))
        return {"completions": _completions(samples), "threads": torch.get_num_threads()}
