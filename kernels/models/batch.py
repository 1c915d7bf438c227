"""What one forward pass computes: a flat batch of token rows cut into per-sequence segments.

Both runtimes describe their work this way. The engine's step mixes prefill chunks and
decodes of many sequences; the trainer's micro-batch packs (or pads) whole sequences. Each
segment names the case its attention runs in; token-parallel regions (GEMMs, norms) run
once over all rows in the batch's case.
"""
from dataclasses import dataclass
from functools import cached_property

import torch

from kernels.contract.regions import CASES
from kernels.ops.transfer import to_device


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of consecutive rows of one sequence."""

    seq_id: int
    """Which sequence (the key of its KV / state in the cache)."""
    start: int
    """Absolute position of the segment's first token in its sequence."""
    length: int
    """Number of token rows."""
    row: int
    """Index of the first row in the flat batch."""
    case: str
    """The case the segment's attention (and other per-sequence regions) runs in."""

    @property
    def rows(self) -> slice:
        return slice(self.row, self.row + self.length)


@dataclass(frozen=True)
class TokenBatch:
    """The rows of one forward pass and how they split into sequences."""

    tokens: torch.Tensor
    """[M] token ids, segments laid end to end."""
    segments: tuple
    """Segments in row order, covering all M rows."""
    case: str
    """Case of the token-parallel regions."""
    position_ids: torch.Tensor | None = None
    """[M] positions already on the device (a CUDA graph's static buffer); None: from segments."""

    def __post_init__(self):
        if self.case not in CASES:
            raise ValueError(f"case {self.case!r} is not one of {CASES}")
        expected_row = 0
        for segment in self.segments:
            if segment.row != expected_row or segment.length <= 0:
                raise ValueError(f"segments must tile the rows in order: {segment}")
            expected_row += segment.length
        if expected_row != self.tokens.shape[0]:
            raise ValueError(f"segments cover {expected_row} rows, tokens has {self.tokens.shape[0]}")

    @cached_property
    def positions(self) -> torch.Tensor:
        """[M] absolute position of each row (built once a forward, as the groups below: every
        layer asks), on the host and copied in one go (one arange per segment on a GPU was a
        kernel launch per sequence of an eager step)."""
        if self.position_ids is not None:
            return self.position_ids
        host = torch.cat([torch.arange(s.start, s.start + s.length) for s in self.segments])
        return to_device(host, self.tokens.device)

    @cached_property
    def groups(self) -> tuple:
        """case_groups(), built once: a mixed step's layers each call a door per group, and
        rebuilding the rows (a host-to-device copy) and the rebased segments (new keys for the
        cache's step tables) per call cost more than the step's kernels on a GPU."""
        return tuple(self.case_groups())

    def case_groups(self) -> list:
        """[CaseGroup] the segments by case, in order of first appearance: one door call each
        for the per-segment regions (an engine step may mix prefill chunks and decodes)."""
        by_case = {}
        for segment in self.segments:
            by_case.setdefault(segment.case, []).append(segment)
        if len(by_case) == 1:
            return [CaseGroup(self.segments[0].case, self.segments, None)]
        groups = []
        for case, members in by_case.items():
            rebased, row = [], 0
            for segment in members:
                rebased.append(Segment(segment.seq_id, segment.start, segment.length, row, case))
                row += segment.length
            rows = torch.cat([torch.arange(s.row, s.row + s.length) for s in members]).to(self.tokens.device)
            groups.append(CaseGroup(case, tuple(rebased), rows))
        return groups

    @classmethod
    def from_sequences(cls, pieces, case, segment_case=None, device="cpu"):
        """pieces: [(seq_id, start, token list)], laid end to end; tokens on `device`."""
        segments, tokens, row = [], [], 0
        for seq_id, start, ids in pieces:
            segments.append(Segment(seq_id, start, len(ids), row, segment_case or case))
            tokens.extend(ids)
            row += len(ids)
        return cls(torch.tensor(tokens, dtype=torch.long, device=device), tuple(segments), case)


@dataclass(frozen=True)
class CaseGroup:
    """The segments of one case, renumbered from row 0 over their own rows."""

    case: str
    segments: tuple
    rows: torch.Tensor | None
    """[R] long: which batch rows the group's rows are; None when it is the whole batch."""


def whole_batch_segments(batch: TokenBatch):
    """The segments when one case group is the whole batch (call_per_case then passes the
    region these very segments), else None."""
    group = batch.groups[0]
    return group.segments if group.rows is None else None


def settle_per_case(dispatch, region: str, batch: TokenBatch, store) -> None:
    """After a stateful region (a scan) wrote each sequence's state: the runtime moves every
    sequence to its segment's end, the rows past its last chunk boundary kept or folded as the
    implementation bound in each case group declares (kernels/ops/registry.py)."""
    for group in batch.groups:
        keeps = dispatch.keeps_unfinished_chunk(region, group.case)
        if keeps is not None:  # None: the dispatch keeps no state (C08's float64 reference)
            store.settle(group.segments, keeps_unfinished_chunk=keeps)


def call_per_case(dispatch, region: str, batch: TokenBatch, layer, row_inputs, *args, **kwargs):
    """`region` once per case group: dispatch(region, case, layer, *row inputs of the group,
    segments, *args, **kwargs), outputs put back in batch row order. A group that is not the
    whole batch names its rows to the observers (dispatch.selecting_rows)."""
    groups = batch.groups
    if groups[0].rows is None:
        return dispatch(region, groups[0].case, layer, *row_inputs, groups[0].segments, *args, **kwargs)
    out = None
    for group in groups:
        with dispatch.selecting_rows(group.rows):
            part = dispatch(region, group.case, layer, *(t[group.rows] for t in row_inputs), group.segments,
                            *args, **kwargs)
        if out is None:
            out = part.new_empty((batch.tokens.shape[0], *part.shape[1:]))
        out[group.rows] = part
    return out
