"""DeepSeek-V4's lightning-indexer selection (kernels/ops/block_topk/): the consistent selection is
the reference's unique key (score desc, position desc, chosen blocks by position desc) on scores
full of ties and signed zeros, which the test proves it met; the fast one (torch.topk) is not
(negative control, with its size). The consistent score of a query is the same bits alone or in a
batch, over all blocks or the prefix a decode step sees, on one thread or two; so a prefill and a
decode choose the same blocks. Scores agree with float64 within a stated tolerance."""
import torch

from gates.case_calls import intra_op_threads
from gates.compare import first_bit_difference
from gates.inputs import fresh_seed
from gates.reference import block_topk as ref
from kernels.ops.block_topk.consistent import score_consistent, select_consistent
from kernels.ops.block_topk.fast import select_fast

QUERIES, HEADS, DIM, RATE, TOP_K = 96, 4, 32, 4, 6
BLOCKS = QUERIES // RATE
SCORE_TOLERANCE = 1e-5  # relative to max |score|: fp32 sums of DIM * HEADS terms vs float64


def _tied_scores(gen):
    """[T, S] scores from {-2, ..., 2} (ties everywhere), about a tenth of the zeros negative."""
    scores = torch.randint(-2, 3, (QUERIES, BLOCKS), generator=gen).float()
    negative_zero = (scores == 0) & (torch.rand(scores.shape, generator=gen) < 0.3)
    return torch.where(negative_zero, torch.tensor(-0.0), scores)


def _ties_across_the_kth_place(scores, positions) -> int:
    """Rows whose k-th and (k+1)-th best visible scores are equal: a tie the key must break."""
    count = 0
    for row, position in zip(scores.tolist(), positions.tolist()):
        seen = sorted(row[:min((position + 1) // RATE, BLOCKS)], reverse=True)
        count += len(seen) > TOP_K and seen[TOP_K - 1] == seen[TOP_K]
    return count


def test_selection_follows_the_unique_key_and_the_fast_topk_does_not():
    seed = fresh_seed()
    gen = torch.Generator().manual_seed(seed)
    scores, positions = _tied_scores(gen), torch.randperm(QUERIES, generator=gen)
    ties = _ties_across_the_kth_place(scores, positions)
    negative_zeros = int(((scores == 0) & torch.signbit(scores)).sum())
    short_rows = int(((positions + 1) // RATE < TOP_K).sum())
    print(f"seed {seed}: {ties} rows tied across the k-th place, {negative_zeros} -0.0 scores, "
          f"{short_rows} rows seeing fewer than {TOP_K} blocks")
    assert ties > 0 and negative_zeros > 0 and short_rows > 0, "the hazards did not occur: the check is vacuous"
    expected = ref.select(scores, positions, top_k=TOP_K, compress_rate=RATE)
    assert torch.equal(select_consistent(scores, positions, top_k=TOP_K, compress_rate=RATE), expected), seed
    differing = int((select_fast(scores, positions, top_k=TOP_K, compress_rate=RATE) != expected).any(-1).sum())
    print(f"fast (torch.topk): {differing} of {QUERIES} rows differ from the unique key")
    assert differing > 0


def _inputs(gen):
    return (torch.randn(QUERIES, HEADS, DIM, generator=gen, dtype=torch.bfloat16),
            torch.randn(BLOCKS, DIM, generator=gen, dtype=torch.bfloat16),
            torch.randn(QUERIES, HEADS, generator=gen))


def test_consistent_scores_are_the_same_bits_in_every_phase():
    seed = fresh_seed()
    q, keys, weights = _inputs(torch.Generator().manual_seed(seed))
    scale = DIM ** -0.5
    with intra_op_threads(2):
        whole = score_consistent(q, keys, weights, scale=scale)
    with intra_op_threads(1):
        for t in (0, QUERIES // 2, QUERIES - 1):
            alone = score_consistent(q[t:t + 1], keys, weights[t:t + 1], scale=scale)
            assert first_bit_difference(alone[0], whole[t]) is None, (seed, t)
            seen = (t + 1) // RATE  # a decode step at position t sees only the completed blocks
            if seen:
                prefix = score_consistent(q[t:t + 1], keys[:seen], weights[t:t + 1], scale=scale)
                assert first_bit_difference(prefix[0], whole[t, :seen]) is None, (seed, t)
    expected = ref.scores(q, keys, weights, scale=scale)
    error = float((whole.double() - expected).abs().max() / expected.abs().max())
    print(f"seed {seed}: consistent scores vs float64, max error relative to max |score| {error:.2e} "
          f"(tolerance {SCORE_TOLERANCE:g})")
    assert error <= SCORE_TOLERANCE


def test_prefill_and_decode_choose_the_same_blocks():
    """The whole prompt scored at once (prefill, the trainer) and each position scored over the
    blocks complete at that step (decode) give every query the same chosen blocks."""
    seed = fresh_seed()
    q, keys, weights = _inputs(torch.Generator().manual_seed(seed))
    positions, scale = torch.arange(QUERIES), DIM ** -0.5
    prefill = select_consistent(score_consistent(q, keys, weights, scale=scale), positions, top_k=TOP_K,
                                compress_rate=RATE)
    for t in range(0, QUERIES, 5):  # from positions that see no block, through fewer than k, to many
        seen = (t + 1) // RATE
        step = score_consistent(q[t:t + 1], keys[:seen], weights[t:t + 1], scale=scale)
        decode = select_consistent(step, positions[t:t + 1], top_k=TOP_K, compress_rate=RATE)
        assert torch.equal(decode[0], prefill[t]), (seed, t)
