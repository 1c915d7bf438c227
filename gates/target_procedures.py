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
    """trainer_bits' answer for an outside target: its score of `sequences`."""
    target = _target(arguments)
    with side_threads("trainer"):
        return {"bits": [int32_bits(s) for s in target.score(_samples(arguments["sequences"]))],
                "threads": torch.get_num_threads()}


def _samples(sequences: list) -> list:
    return [Sample(tuple(s["prompt"]), tuple(s["tokens"]), None, s["temperature"]) for s in sequences]


def prompt_runs(arguments: dict) -> dict:
    """An outside target's greedy completions of each run's `prompts`, submitted together or,
    with the run's `alone`, one prompt per call; one target (one engine build) for every run:
    {runs: [[{prompt, tokens, temperature, bits}]], threads}."""
    target = _target(arguments)
    generate = partial(target.generate_prompts, new_tokens=arguments["new_tokens"])
    with side_threads("engine"):
        return {"runs": [_completions(_together_or_alone(generate, [tuple(p) for p in run["prompts"]], run["alone"]))
                         for run in arguments["runs"]], "threads": torch.get_num_threads()}


def score_runs(arguments: dict) -> dict:
    """An outside target's scores of each run's `sequences`, together or one per call:
    {runs: [[bits]], threads}."""
    target = _target(arguments)
    with side_threads("trainer"):
        return {"runs": [[int32_bits(s) for s in _together_or_alone(target.score, _samples(run["sequences"]),
                                                                     run["alone"])]
                         for run in arguments["runs"]], "threads": torch.get_num_threads()}


def decode_and_prefill(arguments: dict) -> dict:
    """An outside target's greedy decode of each probe's `prompt` (alone) for `new_tokens`, then
    for each k in its `cuts` the prompt and the first k decoded tokens prefilled anew for one
    token, on one target: {probes: [{decoded, prefilled: {k: completion}}], threads}."""
    target = _target(arguments)
    answers = []
    with side_threads("engine"):
        for probe in arguments["probes"]:
            prompt = tuple(probe["prompt"])
            decoded = _completions(target.generate_prompts([prompt], arguments["new_tokens"]))[0]
            answers.append({"decoded": decoded, "prefilled": {
                k: _completions(target.generate_prompts([prompt + tuple(decoded["tokens"][:k])], 1))[0]
                for k in probe["cuts"]}})
        return {"probes": answers, "threads": torch.get_num_threads()}
