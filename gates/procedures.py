"""What the judge's workers compute on the code under test (gates/candidate.py runs them):
procedures that take JSON arguments and answer JSON (token ids, fp32 log-probs as their int32 bit
patterns, counts). Only worker processes import this module; the gate that asked writes the verdict.
What runs is named as a gate's record does, `subject`: {"model", "contract", "checkpoint",
"size"} with `model_seed`; or as a C10 plan does: `config` (a shipped name or a YAML path),
`contract` and the `weights_file` the gate had saved once. `threads` picks the side's CPU pool
("engine" one thread, "trainer" at least two, gates/case_calls.py), so a reduction that follows
the thread count shows.
"""
import dataclasses
import types

import torch

from gates import device, discrete_runs, gradient_runs, graph_runs, layout_plan, rl_runs
from gates.batch_runs import case_runs, probes_for
from gates.boundaries import boundaries
from gates.case_calls import side_threads
from gates.compare import int32_bits
from gates.faults import register_all
from gates.phase_runs import every_phase
from gates.region_runs import every_case, expected_regions
from gates.subject import (
    shipped_sizes,
    subject_config,
    subject_config_path,
    subject_label,
    subject_model,
    subject_weights,
)
from gates.target import outside_target, stack_versions
from gates.target_procedures import (
    decode_and_prefill,
    outside_rollout_bits,
    outside_trainer_bits,
    prompt_runs,
    score_runs,
)
from gates.workload import EngineShape, Workload, make_requests, rollout, score_sequences, seeded_weights
from kernels.contract import load_contract
from kernels.contract.identity import deployment_fingerprint
from kernels.engine.engine import Engine
from kernels.engine.graphs import graphs_unsupported
from kernels.models.config import load_model_config
from kernels.trainer.logprobs import ScoredSequence, scored_sequences
from kernels.trainer.trainer import Trainer


def _named(arguments: dict) -> tuple:
    """(subject, its config) of a gate-named subject, on the asked device, faults registered."""
    register_all()  # the contract under test may name a planted fault
    device.select(arguments.get("device", "cpu"))
    subject = types.SimpleNamespace(**arguments["subject"])
    return subject, subject_config(subject, subject.size)


def _subject(arguments: dict) -> tuple:
    """(config, contract, weights) of the subject: a C10 plan's or a gate-named one."""
    if "weights_file" in arguments:  # a C10 plan
        register_all()
        device.select(arguments.get("device", "cpu"))
        weights = torch.load(arguments["weights_file"], mmap=True, weights_only=True)
        return load_model_config(arguments["config"]), load_contract(arguments["contract"]), weights
    subject, config = _named(arguments)
    return config, load_contract(subject.contract), subject_weights(subject, config, arguments["model_seed"])


def _label(arguments: dict) -> str:
    subject = arguments["subject"]
    return subject_label(types.SimpleNamespace(**subject), subject["size"])


def rollout_bits(arguments: dict) -> dict:
    """The engine's completions of a seeded workload: {completions: [{prompt, tokens,
    temperature, bits}], mixed_steps (steps that mixed prefill and decode), threads, config,
    boundaries (the contract's key block; the SSM chunk, None without Mamba layers)}. An
    outside target reports no engine steps and no boundaries (None)."""
    if outside_target(arguments):
        return outside_rollout_bits(arguments)
    config, contract, weights = _subject(arguments)
    with side_threads("engine"):
        completions, engine = rollout(config, contract, weights, Workload(**arguments["workload"]),
                                      EngineShape(**arguments.get("shape", {})))
        threads = torch.get_num_threads()
    return {"completions": [{"prompt": list(s.prompt), "tokens": list(s.completion), "temperature": s.temperature,
                             "bits": int32_bits(c.logprob_tensor)}
                            for s, c in zip(scored_sequences(completions), completions)],
            "mixed_steps": engine.step_phases[("decode", "prefill")], "threads": threads,
            "boundaries": boundaries(contract, config), "config": _label(arguments)}


def trainer_bits(arguments: dict) -> dict:
    """The trainer's log-probs of `sequences` [{prompt, tokens, temperature}], or of a
    `workload`'s requests completed by `completion_tokens`: {bits, threads}."""
    if outside_target(arguments):
        return outside_trainer_bits(arguments)
    config, contract, weights = _subject(arguments)
    if "sequences" in arguments:
        sequences = [ScoredSequence(tuple(s["prompt"]), tuple(s["tokens"]), s["temperature"])
                     for s in arguments["sequences"]]
    else:
        requests = make_requests(Workload(**arguments["workload"]), config.vocab_size)
        sequences = [ScoredSequence(r.prompt, tuple(tokens), r.params.logprob_temperature)
                     for r, tokens in zip(requests, arguments["completion_tokens"])]
    with side_threads("trainer"):
        scores = score_sequences(config, contract, weights, sequences)
        threads = torch.get_num_threads()
    return {"bits": [int32_bits(s) for s in scores], "threads": threads}


def c00_side(arguments: dict) -> dict:
    """One side of C00, built as a run builds it: the trainer from the subject's seeded weights,
    saving what weight sync sends (Trainer.weights) into `weights_file`; or the engine from
    that file. {identities (semantic, numerical_policy, deployment), comm, config}."""
    subject, config = _named(arguments)
    contract, target = load_contract(subject.contract), device.target()
    if arguments["side"] == "trainer":
        side = Trainer(config, contract, weights=subject_weights(subject, config, arguments["model_seed"]),
                       device=target)
        torch.save(side.weights(), arguments["weights_file"])
    else:
        weights = torch.load(arguments["weights_file"], weights_only=True)
        side = Engine(config, contract, weights, device=target)
    return {"identities": side.identities(), "comm": side.comm, "config": _label(arguments)}


def c01_runs(arguments: dict) -> dict:
    """One run of every case under `seeds` {case: seed} on the seeded model: {runs: {case:
    {calls: [{key, outputs}], shapes}}, expected_regions, config, boundaries (the contract's
    key block, the SSM chunk or None)} (gates/region_runs.py)."""
    subject, config = _named(arguments)
    model = subject_model(subject, config, arguments["model_seed"]).requires_grad_(False).to(device.target())
    contract = load_contract(subject.contract)
    crossing = boundaries(contract, config)
    return {"runs": every_case(model, contract, arguments["seeds"], crossing["key_block"]),
            "expected_regions": expected_regions(config), "config": _label(arguments), "boundaries": crossing}


def sizes(arguments: dict) -> dict:
    """{sizes}: what a gate that runs every shipped size runs for {model, checkpoint}."""
    return {"sizes": shipped_sizes(arguments["model"], arguments["checkpoint"])}


def c02_runs(arguments: dict) -> dict:
    """Every case's probes alone and in batches under `seeds` {case: seed} on the seeded model
    (gates/batch_runs.py): {cases: {case: {alone, batches, threads}}, probes, boundaries, config}."""
    subject, config = _named(arguments)
    model = subject_model(subject, config, arguments["model_seed"]).requires_grad_(False).to(device.target())
    contract = load_contract(subject.contract)
    probes = probes_for(contract, config)
    return {"cases": {case: case_runs(model, contract, case, seed, probes)
                      for case, seed in arguments["seeds"].items()},
            "probes": {kind: [list(p) for p in kind_probes] for kind, kind_probes in probes.items()},
            "boundaries": boundaries(contract, config), "config": _label(arguments)}


def c03_phases(arguments: dict) -> dict:
    """Every phase's position digests under `seed` on the seeded model (gates/phase_runs.py),
    with the config's label."""
    subject, config = _named(arguments)
    model = subject_model(subject, config, arguments["model_seed"]).requires_grad_(False).to(device.target())
    return dict(every_phase(model, load_contract(subject.contract), config, arguments["seed"]),
                config=_label(arguments))


FACTS = ("num_experts_per_tok", "n_routed_experts", "routed_scaling_factor", "hidden_size", "vocab_size",
         "num_kv_heads", "head_dim", "intermediate_size", "expert_quant", "mamba_proj_quant", "dense_quant",
         "kv_cache_dtype", "index_topk", "compress_rate_csa")


def subject_facts(arguments: dict) -> dict:
    """What a judge crafts inputs from: the subject's regions, dtype name and sizes, and its
    quantization settings (None where the family has no such field)."""
    config = _named(arguments)[1]
    return {"regions": list(config.REGIONS), "dtype": str(config.torch_dtype).removeprefix("torch."),
            "label": _label(arguments), **{name: getattr(config, name, None) for name in FACTS}}


def c04_outputs(arguments: dict) -> dict:
    """C04's `calls` {label: call} on the tensors in `inputs_file` (each named label/name), their
    outputs saved to `outputs_file` under the same labels (gates/discrete_runs.py): {names}."""
    subject, config = _named(arguments)
    contract, tensors, result = (load_contract(subject.contract),
                                 torch.load(arguments["inputs_file"], weights_only=True), {})
    for label, call in arguments["calls"].items():  # each call's tensors and outputs named under its label
        mine = {name[len(label) + 1:]: t for name, t in tensors.items() if name.startswith(label + "/")}
        result.update({f"{label}/{name}": t for name, t in discrete_runs.outputs(config, contract, call, mine).items()})
    torch.save({name: t.detach().cpu().contiguous() for name, t in result.items()}, arguments["outputs_file"])
    return {"names": sorted(result)}


def c06_layouts(arguments: dict) -> dict:
    """Every layout pair C06 runs on `backend` within `ranks` (gates/layout_plan.py)."""
    subject, _ = _named(arguments)
    return layout_plan.run_layouts(subject, subject.size, arguments["seed"], arguments["backend"],
                                   arguments["ranks"])


def c08_tested(arguments: dict) -> dict:
    """C08's tested side on the coefficients in `inputs_file`, its tensors saved to
    `outputs_file` (gates/gradient_runs.py): {parameters}."""
    subject, _ = _named(arguments)
    coefficients = torch.load(arguments["inputs_file"], weights_only=True)["coefficients"]
    found, parameters = gradient_runs.tested(subject, subject.size, arguments["model_seed"],
                                             load_contract(subject.contract), arguments["sequences"], coefficients,
                                             device.target())
    torch.save(found, arguments["outputs_file"])
    return {"parameters": parameters}


def c08_reference(arguments: dict) -> dict:
    """C08's float64 reference on the tested side's tensors in `inputs_file` (weights,
    decisions, coefficients), run on the CPU, with the gradients' per-sequence shares if asked; its
    tensors saved to `outputs_file`: {parameters, near_kinks, quantized}."""
    subject, _ = _named(arguments)
    found, answer = gradient_runs.reference(subject, subject.size, arguments["sequences"],
                                            torch.load(arguments["inputs_file"], weights_only=True),
                                            shares=arguments.get("shares", False))
    torch.save(found, arguments["outputs_file"])
    return answer


def c05_graph_facts(arguments: dict) -> dict:
    """What C05 needs before any run: the sources to scan and why no graphs, if so (gates/graph_runs.py)."""
    subject, config = _named(arguments)
    return graph_runs.graph_facts(config, load_contract(subject.contract))


def c05_rollout(arguments: dict) -> dict:
    """C05's rollout under `seed`, eager or graphed (`cuda_graphs`; gates/graph_runs.py)."""
    config, contract, weights = _subject(arguments)
    return dict(graph_runs.graph_run(config, contract, weights, arguments["seed"], arguments["cuda_graphs"]),
                config=_label(arguments))


def c09_steps(arguments: dict) -> dict:
    """GRPO steps on the subject (gates/rl_runs.py): `num_steps` of a fresh run, saved into
    `save_to` after them when given; or, with `resume_from`, that run resumed and stepped once.
    With `full_config`, also the family's full config loaded and validated."""
    config, contract, weights = _subject(arguments)
    seed, crossing = arguments["seed"], boundaries(contract, config)
    if "resume_from" in arguments:
        answer = rl_runs.resumed_step(config, contract, seed, crossing["key_block"], arguments["resume_from"])
    else:
        answer = rl_runs.steps(config, contract, weights, seed, crossing["key_block"], arguments["num_steps"],
                               save_to=arguments.get("save_to"))
    if arguments.get("full_config"):
        answer["full_config"] = rl_runs.full_config(arguments["subject"]["model"])
    return dict(answer, config=_label(arguments), boundaries=crossing,
                settings=dataclasses.asdict(rl_runs.settings(seed, crossing["key_block"])))


def c10_subject(arguments: dict) -> dict:
    """What C10 times for {model, size, checkpoint} and saves in `folder`: {config (the shipped
    name, or the checkpoint's config as YAML there), graphs_refused (why this tree's engine
    replays no decode graphs for it; '' when it does), weights_file (the seeded weights, saved
    once for every worker to map: seeding a full-width model takes tens of seconds)}."""
    subject = types.SimpleNamespace(**arguments)
    config = subject_config_path(subject, subject.size, subject.folder)
    loaded = load_model_config(config)
    weights_file = f"{subject.folder}/weights.pt"
    torch.save(seeded_weights(loaded), weights_file)
    return {"config": config, "graphs_refused": graphs_unsupported(loaded, None) or "", "weights_file": weights_file}


def environment(arguments: dict) -> dict:
    """The deployment fingerprint of the worker's stack (what a gate's JSON records; every
    worker reports it beside its answer)."""
    device.select(arguments.get("device", "cpu"))
    target = outside_target(arguments)
    return {**deployment_fingerprint(), **({"target": target, **stack_versions(target)} if target else {})}


PROCEDURES = {"rollout_bits": rollout_bits, "trainer_bits": trainer_bits,
              "prompt_runs": prompt_runs, "score_runs": score_runs, "decode_and_prefill": decode_and_prefill,
              "c00_side": c00_side, "c01_runs": c01_runs,
              "sizes": sizes,
              "c02_runs": c02_runs, "c03_phases": c03_phases, "subject_facts": subject_facts,
              "c04_outputs": c04_outputs,
              "c06_layouts": c06_layouts, "c08_tested": c08_tested, "c08_reference": c08_reference,
              "c05_graph_facts": c05_graph_facts, "c05_rollout": c05_rollout,
              "c09_steps": c09_steps, "c10_subject": c10_subject, "environment": environment}
