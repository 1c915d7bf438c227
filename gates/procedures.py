"""What the judge's workers compute on the code under test (gates/candidate.py runs them):
procedures that take JSON arguments and answer JSON: token ids, fp32 log-probs as their int32
bit patterns, counts. Only worker processes import this module; the gate that asked compares
the answers and writes the verdict.

`subject` names what runs, as a gate's record does: {"model", "contract", "checkpoint",
"size"}; `threads` picks the side's CPU pool ("engine" one thread, "trainer" at least two,
gates/case_calls.py), so a reduction that follows the thread count shows.
"""
import types

import torch

from gates import device
from gates.case_calls import intra_op_threads, thread_counts
from gates.faults import register_all
from gates.subject import subject_config, subject_label, subject_weights
from gates.workload import EngineShape, Workload, rollout, score_sequences
from kernels.contract import load_contract
from kernels.contract.identity import deployment_fingerprint
from kernels.trainer.logprobs import ScoredSequence, scored_sequences


def _subject(arguments: dict) -> tuple:
    """(config, contract, weights) of the subject, on the asked device, faults registered."""
    register_all()  # the contract under test may name a planted fault
    device.select(arguments.get("device", "cpu"))
    subject = types.SimpleNamespace(**arguments["subject"])
    config = subject_config(subject, subject.size)
    return config, load_contract(subject.contract), subject_weights(subject, config, arguments["model_seed"])


def _threads(side: str):
    engine, trainer = thread_counts()
    return intra_op_threads(engine if side == "engine" else trainer)


def bits(logprobs: torch.Tensor) -> list:
    """fp32 log-probs as int32 bit patterns (JSON carries them exactly)."""
    return logprobs.detach().float().cpu().contiguous().view(torch.int32).tolist()


def rollout_bits(arguments: dict) -> dict:
    """The engine's completions of a seeded workload: {completions: [{prompt, tokens,
    temperature, bits}], mixed_steps (steps that mixed prefill and decode), threads, config}."""
    config, contract, weights = _subject(arguments)
    with _threads("engine"):
        completions, engine = rollout(config, contract, weights, Workload(**arguments["workload"]),
                                      EngineShape(**arguments.get("shape", {})))
        threads = torch.get_num_threads()
    return {"completions": [{"prompt": list(s.prompt), "tokens": list(s.completion), "temperature": s.temperature,
                             "bits": bits(c.logprob_tensor)}
                            for s, c in zip(scored_sequences(completions), completions)],
            "mixed_steps": engine.step_phases[("decode", "prefill")], "threads": threads,
            "config": subject_label(types.SimpleNamespace(**arguments["subject"]), arguments["subject"]["size"])}


def trainer_bits(arguments: dict) -> dict:
    """The trainer's log-probs of sequences [{prompt, tokens, temperature}]: {bits, threads}."""
    config, contract, weights = _subject(arguments)
    sequences = [ScoredSequence(tuple(s["prompt"]), tuple(s["tokens"]), s["temperature"])
                 for s in arguments["sequences"]]
    with _threads("trainer"):
        scores = score_sequences(config, contract, weights, sequences)
        threads = torch.get_num_threads()
    return {"bits": [bits(s) for s in scores], "threads": threads}


def environment(arguments: dict) -> dict:
    """The deployment fingerprint of the worker's stack (what a gate's JSON records)."""
    device.select(arguments.get("device", "cpu"))
    return deployment_fingerprint()


PROCEDURES = {"rollout_bits": rollout_bits, "trainer_bits": trainer_bits, "environment": environment}
