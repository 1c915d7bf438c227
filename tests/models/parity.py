"""What the transformers parity tests share: fixed token sequences, our per-sequence logits from
one packed trainer_fwd batch, the largest absolute difference between two sets of logits, and a
loaded model's weights under an altered config (a negative control's wrong semantics)."""
import dataclasses

import torch

from kernels.contract import load_contract
from kernels.contract.dispatch import RegionDispatch
from kernels.models.batch import TokenBatch
from kernels.models.registry import build_model
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


def under_config(model, config, **changes):
    """`model`'s weights in a model built from `config` with `changes`."""
    altered = build_model(dataclasses.replace(config, **changes), seed=None)
    altered.load_state_dict(model.state_dict())
    return altered
