"""Door tracing: a digest of every region door's output, per token row, for either runtime.
A Tracer observes a runtime's RegionDispatch and writes one JSONL line per door call as it
happens: forward, layer, region, case, ordinal (n-th call of that region in the layer), each row's
token (sequence, position) and per-row digests of the full bits and, optionally, of the bits with
low mantissa bits cleared (how many leading bits still agree); `close()` writes the manifest.
Rows map to tokens through the forward's TokenBatch; doors on a selection of rows (head doors)
name them with `selecting_rows`, and weight_quant gets a whole-tensor digest. Tracing an engine
that replays CUDA graphs is refused: the doors' Python would not run.
"""
import hashlib
import json
from pathlib import Path

import numpy
import torch

from gates.compare import bit_view

MANTISSA_BITS = {torch.float32: 23, torch.float16: 10, torch.bfloat16: 7, torch.float64: 52,
                 torch.float8_e4m3fn: 3, torch.float8_e5m2: 2}
TRUNCATION_KEEP = (16, 10, 7, 4, 0)  # leading mantissa bits kept, clipped to the dtype's
WHOLE_TENSOR_REGIONS = {"weight_quant"}  # outputs are weights, not token rows


class TraceRefused(RuntimeError):
    """The traced path would not be the one that runs."""


def tensors_of(output) -> list:
    items = output if isinstance(output, (tuple, list)) else (output,)
    return [t for t in items if isinstance(t, torch.Tensor)]


def truncation_levels(tensors) -> tuple:
    """The keep levels that exist for the narrowest float among `tensors`."""
    widths = [MANTISSA_BITS[t.dtype] for t in tensors if t.dtype in MANTISSA_BITS]
    if not widths:
        return ()
    return tuple(sorted({min(keep, min(widths)) for keep in TRUNCATION_KEEP}, reverse=True))


def _row_bits(tensor: torch.Tensor, num_rows: int, keep: int | None) -> numpy.ndarray:
    """[num_rows, bytes] uint8 of each row's bits, low mantissa bits cleared to `keep`."""
    flat = bit_view(tensor.detach().cpu().reshape(num_rows, -1))
    if keep is not None and tensor.dtype in MANTISSA_BITS:  # floats only
        drop = MANTISSA_BITS[tensor.dtype] - min(keep, MANTISSA_BITS[tensor.dtype])
        flat = flat & ~((1 << drop) - 1)
    return flat.numpy().view(numpy.uint8).reshape(num_rows, -1)


def row_digests(tensors, num_rows: int, keep: int | None = None) -> list:
    """One hex digest per row over all `tensors` (each [num_rows, ...])."""
    rows = numpy.concatenate([_row_bits(t, num_rows, keep) for t in tensors], axis=1)
    return [hashlib.blake2b(row.tobytes(), digest_size=8).hexdigest() for row in rows]


def whole_digest(tensors) -> str:
    digest = hashlib.blake2b(digest_size=8)
    for tensor in tensors:
        digest.update(str((tuple(tensor.shape), str(tensor.dtype))).encode())
        digest.update(_row_bits(tensor.reshape(1, -1), 1, None).tobytes())
    return digest.hexdigest()


class Tracer:
    """Observer writing `<out>/<side>.jsonl`; attach() to an Engine or a Trainer.

    sequence_ids: "request" (a segment's seq_id is the request id: the engine) or "running"
    (seq ids restart at 0 every forward and count on: the trainer's micro-batches in order).
    """

    def __init__(self, out_dir, side: str, *, sequence_ids="request", truncated=True,
                 regions=None, layers=None, on_call=None):
        self.out_dir, self.side = Path(out_dir), side
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / f"{side}.jsonl"
        self._file = self.path.open("w")
        self.sequence_ids, self.truncated = sequence_ids, truncated
        self.regions, self.layers = regions, layers
        self.on_call = on_call  # optional: called with (door key, call, token keys) of every call
        self.forward, self.num_lines, self.hooked = -1, 0, set()
        self._keys, self._counts, self._next_base = [], {}, 0
        self._hooks, self._dispatches = [], []

    def attach(self, runtime) -> "Tracer":
        if getattr(runtime, "replays_cuda_graphs", False):
            raise TraceRefused(f"{self.side}: the engine replays CUDA graphs; their doors do not "
                               "run Python, so a trace would describe a path that is not executed")
        runtime.dispatch.observers.append(self)
        self._dispatches.append(runtime.dispatch)
        self._hooks.append(runtime.model.register_forward_pre_hook(self._begin_forward))
        return self

    def _begin_forward(self, module, args) -> None:
        batch = args[0]
        self.forward, self._counts = self.forward + 1, {}
        base = self._next_base if self.sequence_ids == "running" else 0
        self._keys = [(base + s.seq_id, s.start + i) for s in batch.segments for i in range(s.length)]
        self._next_base = base + len(batch.segments)

    def _count(self, key) -> int:
        self._counts[key] = self._counts.get(key, -1) + 1
        return self._counts[key]

    def _token_keys(self, call, first):
        """(ordinal, token keys of the rows or None for a whole-tensor door)."""
        if call.rows is not None:
            rows = call.rows.tolist()
            if call.layer is None:
                return self._count(("head", call.region)), [self._keys[r] for r in rows]
            # one case group of a per-case door (kernels/models/batch.py call_per_case): the
            # groups of a layer cover other rows, so each is that door's first call for its rows
            return self._count(("rows", call.region, call.layer, tuple(rows))), [self._keys[r] for r in rows]
        if call.region in WHOLE_TENSOR_REGIONS:
            return self._count((call.region, call.layer)), None
        ordinal = self._count((call.region, call.layer))
        return ordinal, (self._keys if first.dim() and first.shape[0] == len(self._keys) else None)

    def __call__(self, call) -> None:
        if call.case == "engine_graph":
            raise TraceRefused("engine_graph doors are replayed from a CUDA graph, not executed")
        tensors = tensors_of(call.output)
        if not tensors:
            return
        ordinal, tokens = self._token_keys(call, tensors[0])
        if self.on_call is not None:
            self.on_call((call.layer, call.region, ordinal), call, tokens)
        if (self.regions and call.region not in self.regions) or (
                self.layers is not None and call.layer not in self.layers):
            return
        self.hooked.add(call.region)
        line = {"forward": self.forward, "layer": call.layer, "region": call.region, "case": call.case,
                "ordinal": ordinal, "shapes": [list(t.shape) for t in tensors],
                "dtypes": [str(t.dtype) for t in tensors], "digest": whole_digest(tensors), "tokens": None}
        if tokens is not None:
            line["tokens"] = [list(k) for k in tokens]
            line["rows"] = row_digests(tensors, len(tokens))
            if self.truncated:
                line["truncated"] = {str(keep): row_digests(tensors, len(tokens), keep)
                                     for keep in truncation_levels(tensors)}
        self._file.write(json.dumps(line) + "\n")
        self.num_lines += 1

    def close(self, **facts) -> dict:
        """Detach, flush, and write `<side>.manifest.json`: what was hooked and sampled."""
        for hook in self._hooks:
            hook.remove()
        for dispatch in self._dispatches:
            dispatch.observers.remove(self)
        self._file.close()
        manifest = {"side": self.side, "trace": self.path.name, "num_lines": self.num_lines,
                    "num_forwards": self.forward + 1, "regions_hooked": sorted(self.hooked),
                    "sampled": {"regions": sorted(self.regions) if self.regions else "all",
                                "layers": sorted(self.layers) if self.layers is not None else "all"},
                    "row_digests": True, "truncation_keep_bits": list(TRUNCATION_KEEP) if self.truncated else [],
                    "sequence_ids": self.sequence_ids, **facts}
        (self.out_dir / f"{self.side}.manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
        return manifest
