"""C04's worker side (gates/test_c04_discrete.py judges): the judge's crafted inputs, handed over
as a file of tensors, run through one region of the contract in every case (engine cases over
decode-sized row pieces, trainer cases over the whole batch, each in its runtime's autograd
mode: gates/case_calls.py), or through the sampler and the FP8 KV stores as the runtimes call
them. The outputs go back as tensors, read by the judge with torch.load(weights_only=True)
(data, never code), which compares them with each other, with the contract's rules and with
the float64 references; nothing here decides a condition.
"""

from gates import device
from gates.case_calls import per_case, runtime_mode
from kernels.engine.cache import PagedKVCache
from kernels.models.batch import Segment
from kernels.models.state import ContiguousKV
from kernels.ops.sampler import SamplingParams


def _region_call(call: dict, tensors: dict):
    """(region, the op's call, its row tensors) of one named region call."""
    kind = call["kind"]
    if kind == "topk":
        bias = device.place(tensors["bias"])
        return "topk", lambda op, s: op(s, bias, top_k=call["top_k"], scaling=call["scaling"]), (tensors["scores"],)
    if kind == "moe_combine":
        return "moe_combine", lambda op, s, i, w, sh: op(s, i, w, sh), tuple(
            tensors[n] for n in ("slots", "ids", "weights", "shared"))
    if kind == "quant":
        return call["region"], lambda op, t: op(t, fmt=call["fmt"]), (tensors["x"],)
    if kind == "block_topk":
        return "block_topk", lambda op, s, p: op(s, p, top_k=call["top_k"], compress_rate=call["compress_rate"]), (
            tensors["scores"], tensors["positions"])
    if kind == "hash_topk":
        return "hash_topk", lambda op, s, i: op(s, i, scaling=call["scaling"]), (tensors["scores"], tensors["ids"])
    if kind == "mlp_act":
        return "mlp_act", lambda op, g, u: op(g, u), (tensors["gate_in"], tensors["up"])
    raise ValueError(f"no region call {kind!r}")


def sampled(contract, tensors: dict, params: list, runs: list) -> dict:
    """Tokens of each run {case, rows, draws}: the sampler of `case` on logits[rows] with each
    row's params (dicts of SamplingParams) and draw index, in the case's autograd mode."""
    logits, settings = tensors["logits"], [SamplingParams(**p) for p in params]
    tokens = {}
    for index, run in enumerate(runs):
        with runtime_mode(run["case"]):
            tokens[f"run{index}"] = contract.op("sampler", run["case"])(
                device.place(logits[run["rows"]]), [settings[i] for i in run["rows"]], run["draws"]).cpu()
    return tokens


def kv_stored(config, tensors: dict) -> dict:
    """k, v written and read back by the engine's paged FP8 store (a chunked prefill, decodes,
    another chunk) and by the trainer's transient one in both trainer cases."""
    k, v = tensors["k"], tensors["v"]
    length = k.shape[0]
    paged = PagedKVCache(num_layers=1, num_blocks=4, block_size=16, num_kv_heads=config.num_kv_heads,
                         head_dim=config.head_dim, dtype=config.torch_dtype, kv_format="fp8")
    paged.reserve(0, length)
    start = 0
    for size in (13, 1, 1, 20, 1, 12):
        paged.kv(0).write(Segment(0, start, size, 0, "engine_prefill"), k[start:start + size], v[start:start + size])
        start += size
    key, value = paged.kv(0).read(Segment(0, start - 1, 1, 0, "engine_decode"))
    outputs = {"engine (paged store)/0": key, "engine (paged store)/1": value}
    for case in ("trainer_fwd", "trainer_bwd"):
        store, grad = ContiguousKV("fp8"), case == "trainer_bwd"
        store.write(Segment(0, 0, length, 0, case), k.clone().requires_grad_(grad), v.clone().requires_grad_(grad))
        for index, t in enumerate(store.read(Segment(0, 0, length, 0, case))):
            outputs[f"{case}/{index}"] = t.detach()
    return outputs


def outputs(config, contract, call: dict, tensors: dict) -> dict:
    """{name: tensor} of one call: a region's outputs per case ('case/index'), the sampler's
    tokens per run, or the KV stores' read-backs."""
    if call["kind"] == "sampler":
        return sampled(contract, tensors, call["params"], call["runs"])
    if call["kind"] == "kv_store":
        return {name: t.cpu() for name, t in kv_stored(config, tensors).items()}
    region, function, rows = _region_call(call, tensors)
    by_case = per_case(contract, region, function, *rows)
    return {f"{case}/{index}": t for case, out in by_case.items() for index, t in enumerate(out)}
