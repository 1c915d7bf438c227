"""Ops take tensors, the runtime keeps the books: a stateful op (ssm_scan, gated_delta) writes its
sequences' state (S, the rows it keeps) and never their positions; the model settles them after
the call (kernels/models/batch.py: settle_per_case), the same rule on the engine's pooled store and
the trainer's per-sequence one."""
import ast
from pathlib import Path

import pytest
import torch

from kernels.models.batch import Segment
from kernels.models.mamba_pool import PooledMambaStore
from kernels.models.mamba_state import MambaStateStore
from kernels.ops import registry, ssm_scan

ROOT = Path(__file__).resolve().parents[2]
BOOKS = {"folded", "buffered"}
HEADS, HEAD_DIM, GROUPS, STATE, CHUNK = 2, 4, 1, 8, 8


def book_keeping(source: str) -> list:
    """(line, what) for every write of a position field and every settle/advance call in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in (t for group in targets for t in (group.elts if isinstance(group, ast.Tuple) else [group])):
            if isinstance(target, ast.Attribute) and target.attr in BOOKS:
                found.append((node.lineno, f"writes .{target.attr}"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("settle",
                                                                                                      "advance"):
            found.append((node.lineno, f"calls .{node.func.attr}()"))
    return found


def test_no_op_moves_a_sequence_s_position():
    offenders = {str(path.relative_to(ROOT)): hits for path in sorted((ROOT / "kernels" / "ops").rglob("*.py"))
                 if (hits := book_keeping(path.read_text()))}
    assert not offenders, f"ops keep the runtime's books: {offenders}"
    planted = "def scan(x, state, store, segments):\n    state.ssm, state.folded = x, 3\n    store.settle(segments)\n"
    assert book_keeping(planted) == [(2, "writes .folded"), (3, "calls .settle()")], "the check finds nothing"


def _stores():
    shape = dict(conv_rows=3, conv_dim=8, num_heads=HEADS, head_dim=HEAD_DIM, state_size=STATE, num_groups=GROUPS,
                 chunk_size=CHUNK, dtype=torch.float32)
    return MambaStateStore(**shape), PooledMambaStore(**shape)


def _scan(variant, store, segment, generator):
    shapes = ((HEADS, HEAD_DIM), (GROUPS, STATE), (GROUPS, STATE), (HEADS,))
    inputs = [torch.randn(segment.length, *shape, generator=generator) for shape in shapes]
    ssm_scan.VARIANTS[variant](*inputs, (segment,), store, torch.zeros(HEADS), torch.zeros(HEADS), torch.ones(HEADS),
                               chunk_size=CHUNK)
    return registry.keeps_unfinished_chunk(f"ssm_scan.{variant}")


@pytest.mark.parametrize("variant", ["consistent", "fast_chunked", "fast_recurrent"])
def test_settle_moves_every_store_to_the_segment_end(variant, fresh_seed):
    """A prefill, then decodes of one row (batched on the pooled store): after each call and its
    settle the sequence stands at the segment's end, its kept rows those past the last chunk
    boundary (consistent) or none."""
    generator = torch.Generator().manual_seed(fresh_seed)
    length = int(torch.randint(CHUNK + 1, 3 * CHUNK, (1,), generator=generator))
    for store in _stores():
        segments = [Segment(7, 0, length, 0, "engine_prefill")] + [Segment(7, length + t, 1, 0, "engine_decode")
                                                                   for t in range(CHUNK + 1)]
        for segment in segments:
            keeps = _scan(variant, store, segment, generator)
            store.settle((segment,), keeps_unfinished_chunk=keeps)
            end, state = segment.start + segment.length, store.held(7)
            kept = end % CHUNK if keeps else 0
            assert (state.position, state.folded) == (end, end - kept), (type(store).__name__, variant, end)


def test_a_scan_declared_to_fold_that_keeps_rows_is_an_error(fresh_seed):
    """Negative control: the consistent scan keeps rows; settling it as a folding variant would
    lose them, and the per-sequence store says so."""
    store = _stores()[0]
    segment = Segment(3, 0, CHUNK + 3, 0, "trainer_fwd")
    _scan("consistent", store, segment, torch.Generator().manual_seed(fresh_seed))
    with pytest.raises(ValueError, match="3 rows kept by a scan declared to fold every row"):
        store.settle((segment,), keeps_unfinished_chunk=False)
