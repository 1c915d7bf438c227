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
some replayed row must have been sampled inside the graph. For a hybrid model the graphs also serve each Mamba layer's slot and buffered-row tables, and
some replayed row must have completed its SSM chunk (a scan that re-plays its chunk folds it
in place inside the graph), or the comparison misses that path and fails. An engine that
launches decode steps ahead (token ids read on the device) must have launched some, or the
comparison misses that path and fails. Negative control:
the planted fault `attention.planted_graph_baked_block_kv` (gates/faults.py: the walk's key
block chosen on the host from the step's longest context, which a capture bakes at its dummy
context) fails it on the GPU (benchmarks/gpu_gates.sh runs it); a scanned source that calls
torch.compile fails it anywhere (tests/test_gate_c04_c09.py).
"""
import ast
import inspect
from pathlib import Path

import torch

from gates.compare import first_bit_difference
from gates.inputs import fresh_seed
from gates.subject import subject_config, subject_weights
from gates.workload import EngineShape, Workload, rollout
from kernels.contract import load_contract
from kernels.contract.identity import policy_source_files
from kernels.engine.graph_head import tensor_draw
from kernels.engine.graphs import graphs_unsupported
from kernels.ops import registry

COMPILERS = ("compile", "_dynamo")
# decode batches pass through sizes between the captured ones (e.g. 3, 5-7, 9-15): padded replays
WORKLOAD = dict(num_sequences=13, new_tokens=24, min_prompt_len=4, max_prompt_len=40, arrival_spread=9)
SHAPE = EngineShape(tokens_per_step=48, max_running=13, block_size=16)


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


def scanned_sources(contract) -> list:
    """The policy sources and the file of every implementation the contract binds."""
    bound = {inspect.getsourcefile(registry.implementation(b.impl)) for b in contract.bindings.values()}
    return sorted({str(p) for p in policy_source_files()} | bound)


def test_graph_replay_equals_eager(gate):
    contract = load_contract(gate.contract)
    sources = scanned_sources(contract)
    uses = compile_uses(sources)
    gate.inputs = {"scanned_sources": len(sources), "torch_compile_uses": uses}
    if uses:
        gate.check("the consistent path uses no torch.compile (else this gate must compare it with eager)",
                   False, torch_compile_uses=uses)
        gate.verdict()
    if not torch.cuda.is_available():
        gate.n_a("no CUDA device: CUDA graphs need a GPU")
    config = subject_config(gate)
    reason = graphs_unsupported(config, None)
    if reason:
        gate.n_a(f"the engine captures no decode graphs for this model: {reason}")
    seed = fresh_seed()
    gate.inputs.update(seed=seed, workload=WORKLOAD)
    weights, workload = subject_weights(gate, config), Workload(**WORKLOAD, seed=seed)
    eager, _ = rollout(config, contract, weights, workload, SHAPE, device="cuda", cuda_graphs=False)
    graphed, engine = rollout(config, contract, weights, workload, SHAPE, device="cuda", cuda_graphs=True)
    replays, padded = dict(engine.graphs.replays), engine.graphs.padded_replays
    gate.check("decode steps were replayed from CUDA graphs, padded batches among them",
               sum(replays.values()) > 0 and padded > 0, replays_by_size=replays, padded_replays=padded)
    if tensor_draw(engine.dispatch, "engine_graph") is not None:  # the head is captured too
        gate.check("replayed rows were sampled inside the graph (lm_head, draw, log-prob captured)",
                   engine.graphs.rows_sampled_in_graph > 0, rows_sampled_in_graph=engine.graphs.rows_sampled_in_graph,
                   head_replays=engine.graphs.head_replays)
    if engine.look_ahead:  # decode steps launched before their predecessor was collected
        gate.check("decode steps were launched ahead, their token ids read on the device",
                   engine.steps_launched_ahead > 0, steps_launched_ahead=engine.steps_launched_ahead,
                   rows_dropped=engine.rows_dropped)
    mamba = engine.graphs.mamba
    if mamba.buffered_in_graph:  # a scan that buffers its chunk was captured
        gate.check("replayed rows completed SSM chunks, folded inside the graph", mamba.folded_in_graph > 0,
                   rows_buffered_in_graph=mamba.buffered_in_graph, rows_folded_in_graph=mamba.folded_in_graph,
                   eager_steps=engine.graphs.eager_steps)
    differing = [c.request.request_id for c, e in zip(graphed, eager) if c.tokens != e.tokens]
    logprobs = [first_bit_difference(e.logprob_tensor, c.logprob_tensor)
                for c, e in zip(graphed, eager) if c.tokens == e.tokens]
    gate.check("every sampled token and log-prob bit of the graphed run equals the eager run's",
               not differing and all(d is None for d in logprobs),
               sequences=len(eager), tokens=sum(len(e.tokens) for e in eager), token_mismatch_requests=differing,
               logprob_differences=[str(d) for d in logprobs if d is not None][:5])
    gate.verdict()
