"""A DeepSeek-V4 attention layer's per-sequence state: the keys by position (K = V; a query reads
its sliding window of them), and for a compressed layer the compressor's WindowState with the blocks
it has closed (normed and rotated), and for CSA the indexer's. The trainer's store lives for one
forward; every phase reaches the same state by the same windows (kernels/ops/window_compress/).
With an FP8 KV cache the keys, blocks and indexer keys are kept as E4M3 codes in the engine and
read by dequantizing them into a workspace for the one kernel of every phase; the trainer keeps
decode(encode(x)), the same bits, with the gradient straight through (kernels/ops/quant.py).
"""
from dataclasses import dataclass, field

import torch

from kernels.ops.quant import kv_decode, kv_encode, kv_round_trip
from kernels.ops.window_compress.forms import WindowState


@dataclass
class SequenceState:
    keys: list = field(default_factory=list)
    """[rows, D] pieces in position order, as the store keeps them (CompressedStore.kept)."""
    compressor: WindowState = field(default_factory=WindowState)
    blocks: list = field(default_factory=list)
    """[n, D] closed blocks in window order, as the store keeps them."""
    indexer: WindowState = field(default_factory=WindowState)
    index_keys: list = field(default_factory=list)
    """[n, index_head_dim] the indexer's closed blocks, as the store keeps them."""

    @property
    def length(self) -> int:
        """Tokens the state holds: the next segment's start."""
        return sum(piece.shape[0] for piece in self.keys)


class CompressedStore:
    """One layer's states by sequence; a segment at position 0 starts its sequence anew (a layer
    recomputed in backward opens it again), any other must continue where the state stops."""

    def __init__(self, kv_format: str = "auto"):
        self.kv_format = kv_format
        self._states: dict[int, SequenceState] = {}

    def kept(self, segment, x: torch.Tensor) -> torch.Tensor:
        """What the store keeps of keys or blocks x: x itself; with FP8, the engine's E4M3 codes or
        the trainer's decode(encode(x)) (its gradient straight through)."""
        if self.kv_format == "auto":
            return x
        return kv_encode(x, self.kv_format) if segment.case.startswith("engine") else kv_round_trip(x, self.kv_format)

    @staticmethod
    def read(pieces: list, dtype: torch.dtype) -> torch.Tensor:
        """The workspace attention reads: kept pieces in order, dequantized to `dtype`."""
        return kv_decode(torch.cat(pieces), dtype)

    def open(self, segment) -> SequenceState:
        if segment.start == 0:
            self._states[segment.seq_id] = SequenceState()
        state = self._states.get(segment.seq_id)
        held = None if state is None else state.length
        if held != segment.start:
            raise ValueError(f"sequence {segment.seq_id}: a segment at {segment.start}, the state holds {held}")
        return state

    def state(self, seq_id: int) -> SequenceState | None:
        """What the store holds for a sequence (None: nothing yet)."""
        return self._states.get(seq_id)

    def release(self, seq_id: int) -> None:
        self._states.pop(seq_id, None)
