"""C08's scale for a gradient whose random-signed terms cancel (gates/gradient_runs.py): each
parameter's per-sequence shares, taken from one forward, are the norms of the gradients each
sequence gives alone (so their sum bounds the whole gradient's norm from above)."""
import torch

from gates.gradient_runs import _loss_and_grads
from gates.inputs import fresh_seed
from kernels.contract import load_contract
from kernels.contract.dispatch import RegionDispatch
from kernels.models.config import load_model_config
from kernels.models.registry import build_model


def test_shares_are_the_norms_of_each_sequences_gradient_alone():
    seed = fresh_seed()
    gen = torch.Generator().manual_seed(seed)
    config = load_model_config("qwen3-cut")
    model = build_model(config, seed % 1000).double()
    spec = [[torch.randint(1, config.vocab_size, (n,), generator=gen).tolist(),
             torch.randint(1, config.vocab_size, (m,), generator=gen).tolist(), 1.0] for n, m in ((5, 4), (7, 3))]
    coefficients = torch.randn(7, generator=gen, dtype=torch.float64)
    dispatch = RegionDispatch(load_contract("consistent"))
    together = _loss_and_grads(model, dispatch, spec, coefficients, shares=True)
    alone = [_loss_and_grads(model, dispatch, [spec[0]], coefficients[:4]),
             _loss_and_grads(model, dispatch, [spec[1]], coefficients[4:])]
    names = [name for name, _ in model.named_parameters()]
    assert {f"shares/{name}" for name in names} <= set(together), seed
    for name in names:
        expected = sum(float(part[f"grad/{name}"].norm()) for part in alone)
        share = float(together[f"shares/{name}"])
        assert abs(share - expected) <= 1e-6 * expected, (seed, name, share, expected)  # packed vs alone
        assert share >= float(together[f"grad/{name}"].norm()) * (1 - 1e-12), (seed, name)
