"""Gate C08: gradients.

Passes when, for a loss sum_t c_t * logp_t (random c_t) over the completion tokens of a few
sequences on the model's cut run in float32, the loss and every parameter's gradient from the
contract's trainer_bwd forward and autograd (the head's log-prob in chunks of 16 rows, its
lm_head gradient folded over 8-row tiles: kernels/trainer/chunked_head.py) have relative
error at most TOLERANCE (1e-4)
against a float64 reference, relative to the size of their terms (random signs can make a sum
nearly cancel, and relative to the sum itself the figure measures the cancellation): for the
loss |loss - ref| / sum_t |c_t * ref logp_t| (1.16e-4 relative to the loss on one seed whose
loss was 1/2355 of its terms, 4.9e-8 relative to the terms); for a gradient |g - ref| / |ref|
(L2 norms), and where that misses, |g - ref| / sum_s |ref_s|, ref_s the part sequence s
contributes (2.0e-3 relative to |ref| on one draw whose hc_head.scale gradient was 1/300 of its
usual size). The float32 run (the config's bf16
overridden) makes the figure measure the gradient formulas, not bf16 rounding, which C01-C04
and C07 judge bit for bit. The reference is independent where the arithmetic is: the base commit's model
definition (its wiring of splits, reshapes and residual adds is plain tensor plumbing) runs on
a float64 copy of the weights with every region replaced by its float64 formula from
gates/reference, differentiated by torch autograd; MoE routing reuses the tested side's expert
choice, a discrete decision with no gradient, and inputs that put a Mamba dt within 1e-4
(relative) of time_step_min, where the clamp's gradient jumps, are redrawn (at most 4 draws,
each recorded). Every shipped size runs, the quantized cut included, whose quantizers are
straight-through estimators; and every gradient is the same bits, by integer view, when the
tested side recomputes each layer's activations in backward (the trainer's recompute_layers).
The reference's quantized weight is gates/reference/quant.py's
float64 quantization of the master weight (FP8 128x128 blocks or NVFP4, as every contract
stores it), its FP8 activations and FP8 KV take the tested side's quantized values (the
scale and rounding decisions, which C02-C04 judge bit for bit), and every one passes its
gradient through unchanged; the reference must have taken every kind of quantization the
config names (else the size proved nothing), and every quantized weight of the tested forward must
equal the reference's bit for bit (int views). Negative controls: the consistent contract with mlp_act bound to
activation.planted_wrong_gradient fails it on qwen3, and with weight_quant bound to
weight_quant.planted_detached (the same forward, no gradient to the master weight) on the
quantized cut, and weight_quant.planted_reciprocal_scale (FP8 block scales off by one ulp) fails the
bitwise weights; with o_proj's trainer_bwd bound to linear.planted_atomic_split_k (an order
drawn per call) the recomputed forward is another and the recompute condition fails.
The tested side runs in a worker on the judged tree; the reference in a worker on the base
commit's kernels (BITWISE_BASE, default HEAD; exported here), so the model definition it
differentiates is not the candidate's (gates/gradient_runs.py); this process draws the inputs,
compares the answers and writes the verdict, and loads no module of the code under test (a
condition).
"""
import tempfile

import torch

from gates import device
from gates.baseline import ROOT
from gates.candidate import ask_once, ask_tensors, check_judge_clean, confinement
from gates.compare import bit_view, first_bit_difference
from gates.git_objects import export_commit
from gates.gradient_reference import KINK_BAND
from gates.inputs import fresh_seed, generator
from gates.switches import switch

CANDIDATE_IN_WORKERS = True  # gates/conftest.py: this module never imports the code under test
TOLERANCE = 1e-4
MAX_DRAWS = 4  # inputs with a Mamba dt near time_step_min are redrawn, at most this many times


def _sequences(gen, vocab_size) -> list:
    """Three sequences [[prompt], [completion], temperature]; prompt + completion lengths
    cross the SSM chunk (16) and a KV block."""
    shapes = ((5, 9, 1.0), (12, 7, 0.7), (8, 10, 1.0))
    draw = lambda n: [int(t) for t in torch.randint(1, vocab_size, (n,), generator=gen)]  # noqa: E731
    return [[draw(p), draw(c), temperature] for p, c, temperature in shapes]


def _relative_error(value, reference, shares=None) -> float:
    """|value - reference| over the reference's norm, or over the sum of its per-sequence shares'
    norms where the reference gave them (>= its norm: the size of the terms signs can cancel)."""
    scale = float(reference.double().norm()) if shares is None else float(shares)
    return float((value.double() - reference.double()).norm()) / scale if scale > 0 else float("inf")


def _both_sides(asked, facts, gen, reference_tree):
    """Fresh sequences and coefficients; (sequences, tested answer and tensors, reference
    answer and tensors, a call that asks the reference again for the gradients' shares)."""
    spec = _sequences(gen, facts["vocab_size"])
    coefficients = torch.randn(sum(len(c) for _, c, _ in spec), generator=gen, dtype=torch.float64)
    asked = dict(asked, sequences=spec)
    tested, tensors = ask_tensors("c08_tested", asked, {"coefficients": coefficients})
    handed = {name: t for name, t in tensors.items() if name.startswith(("weight/", "decision/"))}

    def reference(shares=False):
        return ask_tensors("c08_reference", dict(asked, device="cpu", shares=shares),
                           {**handed, "coefficients": coefficients}, tree=reference_tree)
    return spec, (tested, tensors), reference(), lambda: reference(shares=True)[1]


def check_quantized_weights(gate, size: str, mine: dict, theirs: dict) -> None:
    """Every weight the tested forward quantized is, bit for bit, the reference's float64
    quantization rounded to fp32: a scale one ulp off flips an element's rounding only now and then,
    too rarely for the gradients to show it on every draw, but it moves these bits every time."""
    names = sorted(name for name in {**mine, **theirs} if name.startswith("quantized/"))
    differing = {name: (-1 if name not in mine or name not in theirs or mine[name].shape != theirs[name].shape
                        else int((bit_view(mine[name]) != bit_view(theirs[name])).sum())) for name in names}
    bad = {name: count for name, count in differing.items() if count}
    gate.check(f"[{size}] every quantized weight equals the float64 reference's quantization, bit for bit",
               bool(names) and not bad, quantized_weights=len(names), differing_elements=dict(list(bad.items())[:8]),
               num_differing_weights=len(bad), note="-1: a weight one side did not quantize, or another shape")


def check_size(gate, size: str, reference_tree) -> None:
    seed = fresh_seed()
    asked = {"subject": gate.subject(size), "model_seed": seed % 1000, "device": device.target()}
    facts, gen = ask_once("subject_facts", {"subject": asked["subject"], "device": asked["device"]}), generator(seed)
    near_kinks = []
    while len(near_kinks) < MAX_DRAWS and (not near_kinks or near_kinks[-1]):
        spec, (tested, mine), (reference, theirs), ask_shares = _both_sides(asked, facts, gen, reference_tree)
        near_kinks.append(reference["near_kinks"])
    gate.inputs["sizes"][size] = {"seed": seed, "config": facts["label"], "dtype": "float32",
                                  "sequences": [[len(p), len(c), t] for p, c, t in spec]}
    formats = [facts.get(name) or "none" for name in ("expert_quant", "mamba_proj_quant", "dense_quant")]
    wanted = {"weights": any(f != "none" for f in formats), "activations": "fp8" in formats[1:],
              "kv": facts["kv_cache_dtype"] == "fp8"}
    if any(wanted.values()):  # the quantized size: its straight-through points must have run
        taken = reference["quantized"]
        gate.check(f"[{size}] the reference took every quantized path the config names", all(
            taken[kind] > 0 for kind, named in wanted.items() if named), straight_through_points=taken)
    if wanted["weights"]:
        check_quantized_weights(gate, size, mine, theirs)
    if "ssm_scan" in facts["regions"]:
        gate.check(f"[{size}] every Mamba dt lies {KINK_BAND:g} (relative) or more from time_step_min, where its "
                   "gradient jumps", near_kinks[-1] == 0, near_kink_dt_per_draw=near_kinks, max_draws=MAX_DRAWS)
    loss, ref_loss, ref_terms = float(mine["loss"]), float(theirs["loss"]), float(theirs["terms"])
    error = abs(loss - ref_loss) / ref_terms
    gate.check(f"[{size}] loss: relative error <= {TOLERANCE:g}", error <= TOLERANCE, relative_error=error,
               tolerance=TOLERANCE, loss=loss, reference_loss=ref_loss, reference_sum_abs_terms=ref_terms)
    differing = [name for name in tested["parameters"] if f"grad/{name}" in mine and (
        f"recomputed/grad/{name}" not in mine
        or first_bit_difference(mine[f"recomputed/grad/{name}"], mine[f"grad/{name}"]) is not None)]
    gate.check(f"[{size}] every gradient bit equal with each layer's activations recomputed in backward",
               not differing and any(name.startswith("recomputed/") for name in mine),
               differing=differing[:8], num_differing=len(differing))
    shares = None
    for name in dict.fromkeys(tested["parameters"] + reference["parameters"]):  # the reference's names too
        grad, expected = mine.get(f"grad/{name}"), theirs.get(f"grad/{name}")
        if name in reference.get("selection_only", ()) and grad is None and expected is None:
            gate.check_n_a(f"[{size}] d loss / d {name}", "the loss reaches it only through a discrete choice "
                           "(the base commit's config says so, and neither side gave it a gradient)")
            continue
        if grad is None or expected is None:
            gate.check(f"[{size}] d loss / d {name}: relative error <= {TOLERANCE:g}", False, tested=grad is not None,
                       reference=expected is not None, note="no gradient reached the parameter")
            continue
        error, figures = _relative_error(grad, expected), {"reference_norm": float(expected.norm())}
        if error > TOLERANCE:  # random signs may have cancelled the sum: measure it against its terms
            shares = shares or ask_shares()  # one more reference run, only for a draw that needs it
            total = shares.get(f"shares/{name}")
            figures["reference_sum_of_sequence_norms"] = None if total is None else float(total)
            error = _relative_error(grad, expected, total)
        gate.check(f"[{size}] d loss / d {name}: relative error <= {TOLERANCE:g}", error <= TOLERANCE,
                   relative_error=error, tolerance=TOLERANCE, **figures)


def test_gradients_match_float64_reference(gate):
    sizes = ask_once("sizes", {"model": gate.model, "checkpoint": gate.checkpoint})["sizes"]
    base = switch("BITWISE_BASE")
    gate.inputs = {"workers": confinement(), "reference_kernels": f"the base commit {base}", "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="c08-base-") as folder:
        reference_tree = export_commit(base, folder, ROOT, paths=("kernels",))
        for size in sizes:  # cut, and cut-quant (NVFP4 and FP8 weights, FP8 activations and KV)
            check_size(gate, size, reference_tree)
    check_judge_clean(gate)
    gate.verdict()
