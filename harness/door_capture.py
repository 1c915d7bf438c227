"""Capture one door call's inputs and output on each side, save them, load them back: enough to
re-run the door standalone with any implementation, as the shrink stage's repro does.
Beside tensors a door receives Segments (plain fields; a call over many is cut to the watched
token's), a layer's Mamba state store (the states copied *before* the call, which advances them;
saved as the watched sequence's) and a KV store (saved as the K/V it holds for the segment's
sequence right after the call: the bits attention read, before a finished sequence's blocks are
freed; on replay the store's write is a no-op).
"""
import dataclasses
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from kernels.models.batch import Segment
from kernels.models.mamba_state import MambaSequenceState, MambaStateStore
from kernels.models.state import KVStore


class SnapshotKV(KVStore):
    """A KV store holding the K/V one sequence had when the door ran (replay only)."""

    def __init__(self, keys, values, kv_format="auto"):
        self.keys, self.values, self.kv_format = keys, values, kv_format

    def write(self, segment, k, v) -> None:
        if segment.start + segment.length > self.keys.shape[0]:
            raise ValueError(f"snapshot holds {self.keys.shape[0]} positions, write reaches "
                             f"{segment.start + segment.length}")

    def read(self, segment):
        end = segment.start + segment.length
        return self.keys[:end], self.values[:end]


class DoorCapture:
    """Captures, on one runtime, the call of `door` (layer, region, ordinal) in forward
    `forward` whose rows include `token`; attach() after the runtime's Tracer."""

    def __init__(self, door, forward: int, token):
        """token None: a whole-tensor door, captured at its first call in `forward`."""
        self.door, self.forward = tuple(door), forward
        self.token = None if token is None else tuple(token)
        self.captured, self._before, self._tracer = None, None, None

    def attach(self, runtime, tracer) -> None:
        self._tracer = tracer
        tracer.on_call = self._on_call
        runtime.dispatch = _SnapshotBefore(runtime.dispatch, self)

    def snapshot_before(self, region, layer, args) -> None:
        if (layer, region) == (self.door[0], self.door[1]) and self._tracer.forward == self.forward:
            self._before = [a.snapshot(_segments_in(args)) if isinstance(a, MambaStateStore) else a
                            for a in args]

    def _on_call(self, door, call, tokens) -> None:
        if self.captured or door != self.door or self._tracer.forward != self.forward:
            return
        if self.token is None:
            self.captured = {"call": call, "args": self._before or list(call.args), "row": None}
        elif tokens is not None and self.token in map(tuple, tokens):
            row = [tuple(t) for t in tokens].index(self.token)
            self.captured = _one_segment(call, self._before or list(call.args), row)
        if self.captured:  # the store's K/V now: the engine frees a finished sequence's blocks
            self.captured["args"] = _stores_snapshotted(self.captured["args"])


def _stores_snapshotted(args) -> list:
    """args with a live KV store replaced by a SnapshotKV of what it holds for the call's one
    segment (a call over many segments keeps its store: save_capture refuses it)."""
    segments = _segments_in(args)
    if len(segments) != 1:
        return args
    return [SnapshotKV(*(t.detach().clone() for t in a.read(segments[0])), "auto")
            if isinstance(a, KVStore) and not isinstance(a, SnapshotKV) else a for a in args]


def _one_segment(call, args, row: int) -> dict:
    """A door called over many segments (attention), cut down to the segment holding `row`:
    its rows of the row inputs and of the output, the segment renumbered from row 0. The
    consistent kernels give a segment the same bits alone as in company (gate C2), so the
    repro replays the small call; any other door is kept whole."""
    segments = next((a for a in args if _is_segments(a)), None)
    if segments is None or len(segments) == 1:
        return {"call": call, "args": args, "row": row}
    segment = next(s for s in segments if s.row <= row < s.row + s.length)
    num_rows = sum(s.length for s in segments)

    def cut(value):
        if _is_segments(value):
            return (Segment(segment.seq_id, segment.start, segment.length, 0, segment.case),)
        if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == num_rows:
            return value[segment.rows]
        return value

    outputs = call.output if isinstance(call.output, (tuple, list)) else (call.output,)
    narrowed = dataclasses.replace(call, args=tuple(cut(a) for a in call.args),
                                   output=type(call.output)(cut(t) for t in outputs)
                                   if isinstance(call.output, (tuple, list)) else cut(call.output))
    return {"call": narrowed, "args": [cut(a) for a in args], "row": row - segment.row}


def _is_segments(value) -> bool:
    return isinstance(value, tuple) and bool(value) and all(isinstance(s, Segment) for s in value)


def _segments_in(args) -> list:
    """Every Segment among a call's arguments, loose or in a tuple."""
    return [a for a in args if isinstance(a, Segment)] + [s for a in args if _is_segments(a) for s in a]


class _SnapshotBefore:
    """The runtime's dispatch, copying mutable per-sequence state before a watched call."""

    def __init__(self, inner, capture):
        self._inner, self._capture = inner, capture

    def __call__(self, region, case, layer, *args, **kwargs):
        self._capture.snapshot_before(region, layer, args)
        return self._inner(region, case, layer, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _spec(value, name: str, tensors: dict, segment):
    if isinstance(value, torch.Tensor):
        tensors[name] = value.detach().cpu().contiguous().clone()  # a CUDA run's repro loads anywhere
        return {"tensor": name}
    if isinstance(value, Segment):
        return {"segment": {f: getattr(value, f) for f in Segment.__slots__}}
    if _is_segments(value):
        return {"segments": [{f: getattr(s, f) for f in Segment.__slots__} for s in value]}
    if isinstance(value, MambaStateStore) and segment is not None:
        state = value.held(segment.seq_id)
        pending = None if state.pending is None else [_spec(t, f"{name}.pending{i}", tensors, segment)
                                                      for i, t in enumerate(state.pending)]
        return {"mamba_store": {"seq_id": segment.seq_id,
                                "conv": _spec(state.conv, f"{name}.conv", tensors, segment),
                                "ssm": _spec(state.ssm, f"{name}.ssm", tensors, segment),
                                "folded": state.folded, "pending": pending}}
    if hasattr(value, "read") and hasattr(value, "write") and segment is not None:
        keys, values = value.read(segment)
        return {"kv_snapshot": {"keys": _spec(keys, f"{name}.keys", tensors, segment),
                                "values": _spec(values, f"{name}.values", tensors, segment),
                                "kv_format": getattr(value, "kv_format", "auto")}}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise ValueError(f"cannot capture a door input of type {type(value).__name__} ({name})")


def save_capture(out_dir: Path, captures: dict) -> dict:
    """captures: {side: DoorCapture.captured}; writes inputs.safetensors and door_call.json."""
    tensors, calls = {}, {}
    for side, captured in captures.items():
        call = captured["call"]
        segments = _segments_in(captured["args"])
        if len(segments) > 1:
            raise ValueError(f"{side}: a {call.region} capture over {len(segments)} segments; capture "
                             f"one token's call, which is cut down to its segment")
        segment = segments[0] if segments else None
        outputs = call.output if isinstance(call.output, (tuple, list)) else (call.output,)
        calls[side] = {
            "region": call.region, "case": call.case, "layer": call.layer, "row": captured["row"],
            "args": [_spec(a, f"{side}.arg{i}", tensors, segment) for i, a in enumerate(captured["args"])],
            "kwargs": {k: _spec(v, f"{side}.kw.{k}", tensors, segment) for k, v in call.kwargs.items()},
            "outputs": [_spec(t, f"{side}.out{i}", tensors, segment) for i, t in enumerate(outputs)]}
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / "inputs.safetensors"))
    (out_dir / "door_call.json").write_text(json.dumps(calls, indent=2))
    return calls


def _value(spec: dict, tensors: dict):
    if "tensor" in spec:
        return tensors[spec["tensor"]]
    if "segment" in spec:
        return Segment(**spec["segment"])
    if "segments" in spec:
        return tuple(Segment(**fields) for fields in spec["segments"])
    if "mamba_store" in spec:
        state = spec["mamba_store"]
        pending = None if state["pending"] is None else [_value(p, tensors) for p in state["pending"]]
        return MambaStateStore.holding({state["seq_id"]: MambaSequenceState(
            _value(state["conv"], tensors), _value(state["ssm"], tensors), state["folded"], pending)})
    if "kv_snapshot" in spec:
        snapshot = spec["kv_snapshot"]
        return SnapshotKV(_value(snapshot["keys"], tensors), _value(snapshot["values"], tensors),
                          snapshot["kv_format"])
    return spec["value"]


def load_capture(directory: Path) -> dict:
    """{side: {"region", "case", "layer", "row", "args", "kwargs", "outputs"}} with live values;
    ValueError when the files are missing or do not belong together."""
    directory = Path(directory)
    try:
        calls = json.loads((directory / "door_call.json").read_text())
        tensors = load_file(str(directory / "inputs.safetensors"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{directory}: not a door capture ({error})") from error
    loaded = {}
    for side, call in calls.items():
        loaded[side] = {**call, "args": [_value(s, tensors) for s in call["args"]],
                        "kwargs": {k: _value(s, tensors) for k, s in call["kwargs"].items()},
                        "outputs": [_value(s, tensors) for s in call["outputs"]]}
    return loaded
