"""C08's worker side (gates/test_c08_gradients.py judges), two procedures in two processes.
`tested` runs the judged tree's trainer_bwd forward and autograd of loss = sum_t c_t * logp_t in
float32 (the head chunked by HEAD_CHUNKING) from the subject's seeded weights, keeping its discrete
decisions (MoE expert ids, FP8 activations, the K and V an FP8 KV store received). `reference`
runs on the base commit's kernels (exported by the gate: a candidate cannot rewire what is
differentiated): that definition on a float64 copy of the tested weights, every region its float64
formula (gates/gradient_reference.py), the decisions replayed. Both answer tensors by name (loss,
sum of |terms|, gradients, quantized/<layer>/<call>: each quantized weight as the forward used it);
tested adds weights, decisions and recomputed/grad/<parameter>, reference (when asked) each
gradient's per-sequence shares.
"""
import dataclasses

import torch

from gates.gradient_reference import ReferenceDispatch
from gates.subject import subject_config, subject_model
from kernels.contract.dispatch import RegionDispatch
from kernels.models.registry import build_model
from kernels.trainer.logprobs import ScoredSequence, sequence_logprobs

HEAD_CHUNKING = {"head_chunk_rows": 16, "head_fold_rows": 8}  # several chunks and fold tiles a run


def float32_config(subject, size: str):
    """The subject's config run in float32 (the config's bf16 overridden): C08 measures the
    gradient formulas, not bf16 rounding."""
    return dataclasses.replace(subject_config(subject, size), dtype="float32")


def _loss_and_grads(model, dispatch, spec: list, coefficients, *, shares=False, **head) -> dict:
    """{loss, terms (sum of |c_t * logp_t|), grad/<parameter>} of the loss over `spec`'s sequences
    [[prompt], [completion], temperature] with the trainer_bwd case. With `shares`, also
    shares/<parameter>: the sum over sequences of the norm of each one's part of the gradient (from
    the same forward), the size of the terms a gradient's random signs can cancel."""
    sequences = [ScoredSequence(tuple(p), tuple(c), t) for p, c, t in spec]
    model.zero_grad(set_to_none=True)
    logprobs = torch.cat(sequence_logprobs(model, dispatch, sequences, "trainer_bwd", **head))
    terms = coefficients.to(logprobs.dtype).to(logprobs.device) * logprobs
    loss = terms.sum()
    found = {"loss": loss.detach().cpu(), "terms": terms.detach().abs().sum().cpu()}
    if shares:
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        totals, start = {}, 0
        for sequence in sequences:
            part = terms[start:start + len(sequence.completion)].sum()
            start += len(sequence.completion)
            grads = torch.autograd.grad(part, [p for _, p in named], retain_graph=True, allow_unused=True)
            for (name, _), grad in zip(named, grads):
                if grad is not None:
                    totals[name] = totals.get(name, 0.0) + float(grad.double().norm())
        found.update({f"shares/{name}": torch.tensor(total, dtype=torch.float64) for name, total in totals.items()})
    loss.backward()
    found.update({f"grad/{name}": p.grad.detach().cpu() for name, p in model.named_parameters() if p.grad is not None})
    return found


def tested(subject, size: str, model_seed: int, contract, spec: list, coefficients, target: str) -> tuple:
    """(tensors, parameter names) of the tested side; tensors also hold weight/<name> (the
    weights before the step) and decision/<region>/<layer>/<call>[/k|/v]."""
    config = float32_config(subject, size)
    model = subject_model(subject, config, model_seed)
    weights = {f"weight/{name}": t.detach().clone() for name, t in model.state_dict().items()}
    calls, kept = {}, {}

    def keep_decisions(call):  # the reference runs on the CPU
        quantized_weight = call.region == "weight_quant" and call.kwargs.get("fmt") != "none"
        fp8_kv = call.region == "attention" and getattr(call.args[4], "kv_format", "auto") == "fp8"
        decision = call.region in ("topk", "act_quant", "block_topk") and call.kwargs.get("fmt") != "none"
        fp8_entries = call.region == "sink_attention" and getattr(config, "kv_cache_dtype", "auto") == "fp8"
        if not (quantized_weight or decision or fp8_kv or fp8_entries):
            return
        index = calls[(call.region, call.layer)] = calls.get((call.region, call.layer), -1) + 1
        name = f"decision/{call.region}/{call.layer}/{index}"
        if quantized_weight:
            kept[quantized_name(call.layer, index)] = call.output.detach().cpu()
        elif call.region == "attention":
            kept[name + "/k"], kept[name + "/v"] = (t.detach().cpu() for t in call.args[1:3])
        elif call.region == "sink_attention":  # the workspace dequantized from the store
            kept[name] = call.args[1].detach().cpu()
        else:
            kept[name] = (call.output[0] if call.region == "topk" else call.output).detach().cpu()

    found = _loss_and_grads(model.to(target), RegionDispatch(contract, [keep_decisions]), spec, coefficients,
                            **HEAD_CHUNKING)
    model.recompute_layers = True  # the trainer's option (kernels/models/recompute.py): the same bits required
    again = _loss_and_grads(model, RegionDispatch(contract), spec, coefficients, **HEAD_CHUNKING)
    recomputed = {f"recomputed/{name}": t for name, t in again.items() if name.startswith("grad/")}
    return {**found, **weights, **kept, **recomputed}, [name for name, _ in model.named_parameters()]


def quantized_name(layer, index) -> str:
    return f"quantized/{layer}/{index}"


def replayed_decisions(tensors: dict) -> dict:
    """decision/<region>/<layer>/<call>[/k|/v] tensors as ReferenceDispatch's lists per
    (region, layer), in call order (K and V as one pair)."""
    calls = {}
    for name, t in tensors.items():
        if name.startswith("decision/"):
            _, region, layer, index, *part = name.split("/")
            calls.setdefault((region, layer), {}).setdefault(int(index), {})[part[0] if part else ""] = t
    return {key: [(c["k"], c["v"]) if "k" in c else c[""] for _, c in sorted(by_index.items())]
            for key, by_index in calls.items()}


def reference(subject, size: str, spec: list, tensors: dict, shares: bool = False) -> tuple:
    """(tensors, {parameters, near_kinks, quantized, selection_only}) of the float64 reference on the
    tested side's weights and decisions; selection_only: the parameters its config says the loss
    reaches only through a discrete choice (no gradient by the architecture)."""
    model = build_model(float32_config(subject, size), seed=None)
    model.load_state_dict({name[len("weight/"):]: t for name, t in tensors.items() if name.startswith("weight/")})
    dispatch = ReferenceDispatch(replayed_decisions(tensors))
    found = _loss_and_grads(model.double(), dispatch, spec, tensors["coefficients"], shares=shares)
    found.update({quantized_name(layer, index): w for layer, weights in dispatch.weights.items()
                  for index, w in enumerate(weights)})
    names = [name for name, _ in model.named_parameters()]
    selection_only = getattr(model.config, "SELECTION_ONLY", ())  # the base commit's declaration
    return found, {"parameters": names, "near_kinks": dispatch.near_kinks, "quantized": dispatch.quantized,
                   "selection_only": [name for name in names if any(part in name for part in selection_only)]}
