"""A DeepSeek-V4 attention layer's per-sequence state: the keys by position (K = V; a query reads
its sliding window of them), and for a compressed layer the compressor's WindowState with the blocks
it has closed (normed and rotated), and for CSA the indexer's. The trainer's store lives for one
forward; every phase reaches the same state by the same windows (kernels/ops/window_compress/).
"""
from dataclasses import dataclass, field

from kernels.ops.window_compress.forms import WindowState


@dataclass
class SequenceState:
    keys: list = field(default_factory=list)
    """[rows, D] pieces in position order."""
    compressor: WindowState = field(default_factory=WindowState)
    blocks: list = field(default_factory=list)
    """[n, D] closed blocks in window order."""
    indexer: WindowState = field(default_factory=WindowState)
    index_keys: list = field(default_factory=list)
    """[n, index_head_dim] the indexer's closed blocks."""

    @property
    def length(self) -> int:
        """Tokens the state holds: the next segment's start."""
        return sum(piece.shape[0] for piece in self.keys)


class CompressedStore:
    """One layer's states by sequence; a segment at position 0 starts its sequence anew (a layer
    recomputed in backward opens it again), any other must continue where the state stops."""

    def __init__(self):
        self._states: dict[int, SequenceState] = {}

    def open(self, segment) -> SequenceState:
        if segment.start == 0:
            self._states[segment.seq_id] = SequenceState()
        state = self._states.get(segment.seq_id)
        held = None if state is None else state.length
        if held != segment.start:
            raise ValueError(f"sequence {segment.seq_id}: a segment at {segment.start}, the state holds {held}")
        return state

    def release(self, seq_id: int) -> None:
        self._states.pop(seq_id, None)
