"""DeepSeek-V4's lightning indexer (compressed sparse attention): query t at position p scores the
compressed blocks, score_s = sum_h w_h * ReLU(q_h . k_s) * scale, and keeps the top_k blocks it may
see (s < (p + 1) // compress_rate), -1 where fewer are visible. Consistency: every score is one
fixed-order sum (D, then heads in order), independent of how many queries and blocks a call holds;
ties go by one unique key (score desc, then the larger position first) and the chosen blocks are
ordered by position, descending, in every phase. Reference: gates/reference/block_topk.py.
The scores are the block_score family (SCORERS), the choice this one.
"""
from kernels.ops.block_topk import consistent, fast

VARIANTS = {"fast": fast.select_fast, "consistent": consistent.select_consistent}
SCORERS = {"fast": fast.score_fast, "consistent": consistent.score_consistent}
CALL_KEYWORDS = {"top_k", "compress_rate"}
