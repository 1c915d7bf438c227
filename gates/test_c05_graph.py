"""Gate C05: graph == eager.

Passes when the engine's decode steps replayed from CUDA graphs (kernels/engine/graphs.py)
give the bits of the same engine run eagerly: every sampled token and every log-prob bit of a
continuous-batching workload whose decode batches take sizes between the captured ones, so
replays ran padded (capture at dummy sizes must bake no shape shortcut: a kernel deciding
anything from the capture's dummy rows would change the bits of the real ones). The graphed
run must have replayed graphs, padded ones included, or the comparison is vacuous and fails.
torch.compile is not used by the consistent path: the gate parses every source that decides
bits (kernels.contract.identity.policy_source_files and the file of every implementation the
contract binds) for torch.compile or torch._dynamo; a use is a failing condition, since
compiled code would need its own comparison here. n/a without CUDA ("no CUDA device: CUDA
graphs need a GPU") and for an engine whose decode is not captured (the reason is printed).
Where the sampler has a tensor form the head (lm_head, draw, log-prob) is captured too, and
some replayed row must have been sampled inside the graph. For a hybrid model the graphs also
serve each Mamba layer's slot and buffered-row tables, and
some replayed row must have completed its SSM chunk (a scan that re-plays its chunk folds it
in place inside the graph), or the comparison misses that path and fails. An engine that
launches decode steps ahead (token ids read on the device) must have launched some, or the
comparison misses that path and fails. The workload's contexts must cross the contract's key
block and, for a hybrid model, an SSM chunk (else vacuous: a fail). The eager and the graphed
run are separate workers (gates/graph_runs.py), so neither can hand its outputs to the other;
the sources are scanned here, as text; this process, which writes the verdict, loads no
module of the code under test (a condition). Negative control:
the planted fault `attention.planted_graph_baked_block_kv` (gates/faults.py: the walk's key
block chosen on the host from the step's longest context, which a capture bakes at its dummy
context) fails it on the GPU (benchmarks/gpu_gates.sh runs it); a scanned source that calls
torch.compile fails it anywhere (tests/gates/test_gate_c04_c09.py).
"""
import ast
from pathlib import Path

import torch

from gates import device
from gates.boundaries import check_crossed
from gates.candidate import ask, check_judge_clean, confinement
from gates.inputs import fresh_seed

CANDIDATE_IN_WORKERS = True  # gates/conftest.py: this module never imports the code under test
COMPILERS = ("compile", "_dynamo")


def _uses_compile(node) -> bool:
    """torch.compile / torch._dynamo used as an attribute or imported (code only, not docstrings)."""
    if isinstance(node, ast.Attribute):
        return node.attr in COMPILERS and isinstance(node.value, ast.Name) and node.value.id == "torch"
    if isinstance(node, ast.ImportFrom):
        return node.module == "torch._dynamo" or (
            node.module == "torch" and any(alias.name in COMPILERS for alias in node.names))
    return isinstance(node, ast.Import) and any(alias.name.startswith("torch._dynamo") for alias in node.names)


def compile_uses(paths) -> list:
    """'path:line' of every use of torch.compile or torch._dynamo in the given sources."""
    return [f"{path}:{node.lineno}" for path in paths
            for node in ast.walk(ast.parse(Path(path).read_text())) if _uses_compile(node)]


def bit_differences(eager: list, graphed: list) -> dict:
    """Figures of two runs' completions [[tokens, log-prob bits]]: the requests whose tokens
    differ, and for the others the first log-prob whose bits differ."""
    tokens = [i for i, (e, g) in enumerate(zip(eager, graphed)) if e[0] != g[0]]
    logprobs = [f"request {i}, token {next(t for t, (a, b) in enumerate(zip(e[1], g[1])) if a != b)}"
                for i, (e, g) in enumerate(zip(eager, graphed)) if e[0] == g[0] and e[1] != g[1]]
    return {"sequences": len(eager), "tokens": sum(len(e[0]) for e in eager),
            "token_mismatch_requests": tokens + ([f"{len(eager)} vs {len(graphed)} requests"]
                                                 if len(eager) != len(graphed) else []),
            "logprob_differences": logprobs[:5], "num_logprob_differences": len(logprobs)}


def test_graph_replay_equals_eager(gate):
    asked = {"subject": gate.subject(), "model_seed": 0, "device": device.target()}
    facts = ask("c05_graph_facts", asked)
    uses = compile_uses(facts["sources"])
    gate.inputs = {"scanned_sources": len(facts["sources"]), "torch_compile_uses": uses, "workers": confinement()}
    if uses:
        gate.check("the consistent path uses no torch.compile (else this gate must compare it with eager)",
                   False, torch_compile_uses=uses)
        gate.verdict()
    if not torch.cuda.is_available():
        gate.n_a("no CUDA device: CUDA graphs need a GPU")
    if facts["graphs_refused"]:
        gate.n_a(f"the engine captures no decode graphs for this model: {facts['graphs_refused']}")
    seed = fresh_seed()
    gate.inputs["seed"] = seed
    asked = dict(asked, model_seed=seed % 1000, seed=seed)
    eager = ask("c05_rollout", dict(asked, cuda_graphs=False), side="eager")
    graphed = ask("c05_rollout", dict(asked, cuda_graphs=True), side="graphed")
    gate.inputs.update(config=graphed["config"], workload=graphed["workload"])
    ran = graphed["graphs"]
    check_crossed(gate, graphed["contexts"], graphed["boundaries"])
    gate.check("decode steps were replayed from CUDA graphs, padded batches among them",
               sum(ran["replays_by_size"].values()) > 0 and ran["padded_replays"] > 0,
               replays_by_size=ran["replays_by_size"], padded_replays=ran["padded_replays"])
    if ran["head_captured"]:  # the head is captured too
        gate.check("replayed rows were sampled inside the graph (lm_head, draw, log-prob captured)",
                   ran["rows_sampled_in_graph"] > 0, rows_sampled_in_graph=ran["rows_sampled_in_graph"],
                   head_replays=ran["head_replays"])
    if ran["look_ahead"]:  # decode steps launched before their predecessor was collected
        gate.check("decode steps were launched ahead, their token ids read on the device",
                   ran["steps_launched_ahead"] > 0, steps_launched_ahead=ran["steps_launched_ahead"],
                   rows_dropped=ran["rows_dropped"])
    if ran["rows_buffered_in_graph"]:  # a scan that buffers its chunk was captured
        gate.check("replayed rows completed SSM chunks, folded inside the graph", ran["rows_folded_in_graph"] > 0,
                   rows_buffered_in_graph=ran["rows_buffered_in_graph"],
                   rows_folded_in_graph=ran["rows_folded_in_graph"], eager_steps=ran["eager_steps"])
    figures = bit_differences(eager["completions"], graphed["completions"])
    gate.check("every sampled token and log-prob bit of the graphed run equals the eager run's",
               not figures["token_mismatch_requests"] and not figures["num_logprob_differences"], **figures)
    check_judge_clean(gate)
    gate.verdict()
