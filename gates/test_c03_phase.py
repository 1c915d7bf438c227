"""Gate C03: phase consistency.

Passes when, per token of random sequences on the model's cut (and on its quantized cut
with FP8 KV where one exists), chunked prefill at several chunk sizes, token-by-token decode
and trainer_fwd each give the same bits as full prefill for the final hidden state, the
logits and every layer's attention and ssm_scan output, and the real Engine (paged KV cache,
continuous batching with chunked prompts mixed with decodes) gives the same bits as
trainer_fwd for the same tokens. Negative control: the fast contract fails it, and so does
the consistent contract with the decode case only remapped to a kernel that does not re-play
prefill's arithmetic (attention.fast_split_kv on qwen3, ssm_scan.fast_recurrent on nemotron).
Rows are compared per position by the sha256 of their bytes, computed in a worker process
(gates/candidate.py, gates/phase_runs.py); this process, which writes the verdict, loads no
module of the code under test (a condition; `harness locate` gives the elements of a
difference).

What the phases are: gates/phase_runs.py. The longest sequence runs past three of the
widest key blocks the contract's attention pins (block_kv, tokens_per_split;
BITWISE_C03_KEY_BLOCKS changes the count), and a key block past any wider integer constant its
attention pins (a context threshold: a split that starts at long contexts is met, its
negative control tests/gates/test_gate_c01_c03.py); the coverage record says which key blocks and SSM
chunks the probes crossed, and fewer than 2 of either fails the gate as vacuous. A long
probe (thousands of tokens, one sequence) is prefilled whole, prefilled then decoded at its
end, and scored by trainer_fwd: a walk that changes at a context no constant names is met.
An outside target (gates/target.py), which has no region doors, is judged on its engine
side: a probe's greedy decode against fresh prefills of its prompt and first k tokens, at
random k (gates/target_runs.py).
"""

from gates import device
from gates.candidate import ask, ask_once, check_judge_clean, confinement
from gates.inputs import fresh_seed
from gates.target_runs import check_phases, judge_outside, phase_runs

CANDIDATE_IN_WORKERS = True  # gates/conftest.py: this module never imports the code under test
TARGET_NEEDS = ()  # an outside target is judged on its generate (below)


def _order(key: str) -> tuple:
    """Computation order: per-layer regions by layer, then the final hidden state, then logits."""
    quantity, _, seq = key.rpartition("|")
    layer = int(quantity.rpartition("@layer")[2]) if "@layer" in quantity else None
    return (layer if layer is not None else 10**6 + ("logits" == quantity), int(seq))


def compare(expected: dict, got: dict) -> dict:
    """Figures: tensors and positions compared, the quantities that differ, and the first
    difference in computation order: quantity, sequence, position, the positions that differ
    (None when every bit agrees)."""
    figures = {"num_tensors": len(expected), "quantities": sorted({k.rpartition("|")[0] for k in expected}),
               "num_positions": sum(len(rows) for key, rows in expected.items() if key.startswith("hidden|")),
               "differing": [], "first_difference": None}
    for key in sorted(expected, key=_order):
        quantity, _, seq = key.rpartition("|")
        reference, other = expected[key], got.get(key)
        if other is None or len(other) != len(reference):
            found = {"detail": "missing" if other is None else f"{len(other)} positions vs {len(reference)}"}
        else:
            positions = [p for p, (a, b) in enumerate(zip(reference, other)) if a != b]
            found = positions and {"position": positions[0], "num_differing_positions": len(positions),
                                   "detail": "bits differ"}
        if found:
            figures["differing"] = sorted(set(figures["differing"]) | {quantity})
            figures["first_difference"] = figures["first_difference"] or {"quantity": quantity, "sequence": int(seq),
                                                                           **found}
    return figures


def test_every_phase_gives_the_same_bits(gate):
    if gate.target != "ours":
        return judge_outside(gate, phase_runs, check_phases, "every region's bits equal in every phase")
    sizes = ask_once("sizes", {"model": gate.model, "checkpoint": gate.checkpoint})["sizes"]
    gate.inputs = {"workers": confinement(), "sizes": {}}
    for size in sizes:
        seed = fresh_seed()
        answer = ask("c03_phases", {"subject": gate.subject(size), "model_seed": seed % 1000, "seed": seed,
                                    "device": device.target()})
        crossed, has_ssm = answer["inputs"]["coverage"], answer["inputs"]["has_ssm"]
        gate.inputs["sizes"][size] = {"config": answer["config"], "seed": seed, "model_seed": seed % 1000,
                                      **answer["inputs"], "engine": answer["engine"]["facts"]}
        gate.check(f"[{size}] the probes cross 2+ key blocks{' and SSM chunks' if has_ssm else ''} (else vacuous)",
                   crossed["key_blocks_crossed"] >= 2 and (crossed["ssm_chunks_crossed"] >= 2 or not has_ssm),
                   **crossed)
        long = answer["long"]
        gate.inputs["sizes"][size]["long_probe_tokens"] = long["tokens"]
        for full, phases in ((answer["full"], answer["phases"]), (long["full"], long["phases"])):
            for phase in phases:
                figures = compare(full, phase["rows"])
                gate.check(f"[{size}] {phase['name']} == full prefill", figures["first_difference"] is None,
                           num_forwards=phase["num_forwards"], **figures)
        engine, facts = answer["engine"], answer["engine"]["facts"]
        figures = compare(engine["reference"], engine["rows"])
        gate.check(f"[{size}] engine (paged KV, {facts['kv_cache_dtype']}) == trainer_fwd",
                   figures["first_difference"] is None, **figures)
        gate.check(f"[{size}] the engine chunked prompts and mixed prefill with decode",
                   facts["mixed_steps"] > 0 and facts["chunks_past_position_0"] > 0, **facts)
    check_judge_clean(gate)
    gate.verdict()
