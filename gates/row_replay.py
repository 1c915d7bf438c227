"""C02's row replay, as its worker computes it: every call of a row-wise region seen in a case's
forwards (output row i a function of input row i alone) replayed on all the rows its call site
saw, as one call and in calls of 1 to 64 rows, each row's outputs compared bit for bit.
Why: a kernel constant that follows the row count shows in few rows, and an fp32 reduction rounded
to bf16 moves few elements (benchmarks/gpu_plant_effects.py); replaying every row gives each row
count many rows, and the norms run again widened to fp32, where any change of sum order shows.
Row arguments are those whose length follows the rows at every capture of a site seen at two row
counts or more. On the CPU the small calls run on 1 intra-op thread, the whole on at least 2.
"""
import itertools

import torch

from gates.case_calls import intra_op_threads, thread_counts
from gates.compare import bit_view
from kernels.contract.regions import REGION_FAMILY

ROW_FAMILIES = ("embedding", "norm", "linear", "rope", "activation", "gated_norm", "router", "topk", "relu2_mlp",
                "act_quant", "logprob", "sampler", "sigmoid_gate", "gated_norm_after")
# fp32 reductions rounded once: fp32 rows show their order
WIDENED_FAMILIES = ("norm", "gated_norm", "gated_norm_after")
CALL_SIZES = (1, 2, 3, 5, 8, 13, 16, 17, 31, 64)


def _rows_of(value):
    return len(value) if isinstance(value, (list, tuple)) else value.shape[0] if (
        isinstance(value, torch.Tensor) and value.dim()) else None


def _kept(value, rows: int):
    """What a capture keeps of an argument: a copy of what may be a row argument (a caller may
    reuse its buffer), the rest (weights, constants) as it is."""
    if isinstance(value, torch.Tensor) and _rows_of(value) == rows:
        return value.detach().clone()
    return list(value) if isinstance(value, list) else value


class RowCapture:
    """Observer: the arguments and row count of every row-wise region call, by call site
    (region, case, layer, n-th call of that key in its forward); `start()` marks a forward."""

    def __init__(self):
        self.sites, self.counts = {}, {}

    def start(self):
        self.counts = {}

    def __call__(self, call):
        if REGION_FAMILY.get(call.region) not in ROW_FAMILIES or call.segment is not None:
            return  # a call on one sequence alone: its outputs are compared whole (gates/batch_runs.py)
        outputs = call.output if isinstance(call.output, tuple) else (call.output,)
        rows = next((_rows_of(t) for t in outputs if isinstance(t, torch.Tensor)), None)
        if not rows:
            return
        key = (call.region, call.case, call.layer)
        n = self.counts[key] = self.counts.get(key, -1) + 1
        self.sites.setdefault(key + (n,), []).append(
            (rows, tuple(_kept(a, rows) for a in call.args), {k: _kept(v, rows) for k, v in call.kwargs.items()}))


def _row_slots(captures) -> list:
    """Positions (index or name) of the arguments that follow the call's rows at every capture."""
    first = captures[0]
    slots = [i for i in range(len(first[1]))] + list(first[2])
    return [s for s in slots if all(_rows_of(args[s] if isinstance(s, int) else kwargs.get(s)) == rows
                                    for rows, args, kwargs in captures)]


def _joined(values):
    return torch.cat(values) if isinstance(values[0], torch.Tensor) else list(itertools.chain(*values))


def _call(dispatch, site, slots, args, kwargs, lo, hi):
    region, case, layer, _ = site
    pick = {s: (args[s] if isinstance(s, int) else kwargs[s])[lo:hi] for s in slots}
    out = dispatch(region, case, layer, *(pick.get(i, a) for i, a in enumerate(args)),
                   **{k: pick.get(k, v) for k, v in kwargs.items()})
    return [t for t in (out if isinstance(out, tuple) else (out,)) if isinstance(t, torch.Tensor)]


def _row_bits(t: torch.Tensor) -> torch.Tensor:
    return bit_view(t.cpu()).reshape(t.shape[0], -1)


def replay_site(dispatch, site, captures, slots, widen: bool) -> dict:
    """One site's replay on its row arguments `slots`: rows, rows that differ, the first one."""
    args = list(captures[0][1])
    kwargs = dict(captures[0][2])
    for s in slots:
        joined = _joined([(a[s] if isinstance(s, int) else k[s]) for _, a, k in captures])
        if widen and isinstance(joined, torch.Tensor) and joined.dtype in (torch.bfloat16, torch.float16):
            joined = joined.float()
        if isinstance(s, int):
            args[s] = joined
        else:
            kwargs[s] = joined
    total = sum(rows for rows, _, _ in captures)
    small_threads, whole_threads = thread_counts()
    with torch.no_grad():
        with intra_op_threads(whole_threads):
            whole = _call(dispatch, site, slots, args, kwargs, 0, total)
        pieces, sizes, lo = [], [], 0
        with intra_op_threads(small_threads):
            for size in itertools.cycle(CALL_SIZES):
                if lo >= total:
                    break
                pieces.append(_call(dispatch, site, slots, args, kwargs, lo, min(total, lo + size)))
                sizes += [min(size, total - lo)] * min(size, total - lo)
                lo += size
    differing, first = 0, None
    for index, tensor in enumerate(whole):
        if tensor.dim() == 0 or tensor.shape[0] != total:
            continue
        small = torch.cat([piece[index] for piece in pieces])
        bad = (_row_bits(tensor) != _row_bits(small)).any(dim=1)
        differing += int(bad.sum())
        if first is None and bad.any():
            row = int(bad.nonzero()[0, 0])
            first = {"output": index, "row": row, "call_rows": sizes[row], "whole_rows": total}
    return {"rows": total, "differing_rows": differing, "first_difference": first}


def replay(dispatch, capture: RowCapture) -> dict:
    """Every replayable site of `capture`, at the runtime's dtypes and (norms) widened:
    {sites, widened_sites, rows: [min, max], differing_rows, differing_sites, first_difference,
    skipped: {reason: count}}."""
    record = {"sites": 0, "widened_sites": 0, "rows": [None, None], "call_sizes": list(CALL_SIZES),
              "differing_rows": 0, "differing_sites": {}, "first_difference": None, "skipped": {}}
    for site, captures in capture.sites.items():
        slots = _row_slots(captures)
        if len({rows for rows, _, _ in captures}) < 2 or not slots:
            reason = "seen at one row count" if len({r for r, _, _ in captures}) < 2 else "no row argument"
            record["skipped"][reason] = record["skipped"].get(reason, 0) + 1
            continue
        widen_too = REGION_FAMILY[site[0]] in WIDENED_FAMILIES
        for widen in (False, True) if widen_too else (False,):
            found = replay_site(dispatch, site, captures, slots, widen)
            record["sites" if not widen else "widened_sites"] += 1
            low, high = record["rows"]
            record["rows"] = [min(low or found["rows"], found["rows"]), max(high or 0, found["rows"])]
            if found["differing_rows"]:
                name = f"{site[0]}{' (fp32 rows)' if widen else ''}"
                record["differing_rows"] += found["differing_rows"]
                record["differing_sites"][name] = record["differing_sites"].get(name, 0) + 1
                if record["first_difference"] is None:
                    record["first_difference"] = {"region": site[0], "case": site[1], "layer": site[2],
                                                  "call": site[3], "widened": widen, **found["first_difference"]}
    return record
