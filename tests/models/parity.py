"""What the transformers parity tests share: fixed token sequences, our per-sequence logits from
one packed trainer_fwd batch, and the largest absolute difference between two sets of logits."""
import torch

from kernels.contract import load_contract
from kernels.contract.dispatch import RegionDispatch
from kernels.models.batch import TokenBatch
from kernels.models.state import TransientCache


def fixed_sequences(lengths, vocab: int) -> list:
    """Token ids of the given lengths, the same on every run (seed 1)."""
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, vocab, (n,), generator=generator).tolist() for n in lengths]


def packed_logits(model, contract_name: str, sequences) -> list:
    """Per-sequence [T, V] logits from one packed trainer_fwd batch."""
    dispatch = RegionDispatch(load_contract(contract_name))
    batch = TokenBatch.from_sequences([(i, 0, ids) for i, ids in enumerate(sequences)], "trainer_fwd")
    with torch.no_grad():
        logits = model.logits(model(batch, dispatch, TransientCache(model.config.num_layers)), dispatch,
                              "trainer_fwd")
    return [logits[segment.rows] for segment in batch.segments]


def max_diff(ours, theirs) -> float:
    return max(float((a - b).abs().max()) for a, b in zip(ours, theirs))
