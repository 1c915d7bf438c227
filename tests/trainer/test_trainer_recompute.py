"""Per-layer activation recompute (kernels/models/recompute.py) moves no bit: one micro-batch's
log-probs, loss and every gradient are equal by integer view with it on and off, on both model
cuts, while what autograd saves for backward shrinks (as saved-tensor hooks count it: they do
not see the recompute's own saves, one layer's at a time during backward). The negative
control proves the comparison sees a change: another micro-batch size moves gradient bits."""
import pytest
import torch

from gates.compare import assert_bitwise_equal
from kernels.models.config import load_model_config
from kernels.trainer.micro_batch import leaf
from tests.trainer.test_trainer_memory import _peak_saved, leaf_inputs


def _update(config, seed, recompute, micro_batch=4):
    """(saved-for-backward peak bytes, (log-probs, loss, grads)) of one update of 4 sequences."""
    trainer, sequences, advantages, old = leaf_inputs(config, seed, micro_batch, recompute_layers=recompute)
    found = {}
    peak = _peak_saved(lambda: found.update(result=leaf(trainer, sequences, advantages, old, list(range(4)))))
    return peak, found["result"]


@pytest.mark.parametrize("model", ["qwen3-cut", "nemotron-cut"])
def test_recompute_moves_no_bit_and_saves_less(model, fresh_seed):
    config = load_model_config(model)
    kept_peak, (kept_lp, kept_loss, kept_grads) = _update(config, fresh_seed, recompute=False)
    redone_peak, (redone_lp, redone_loss, redone_grads) = _update(config, fresh_seed, recompute=True)
    print(f"{model}: saved for backward, kept {kept_peak} B, recomputed {redone_peak} B")
    for kept, redone in zip(kept_lp, redone_lp):
        assert_bitwise_equal(redone, kept, "log-probs")
    assert_bitwise_equal(redone_loss, kept_loss, "loss")
    assert set(redone_grads) == set(kept_grads)
    for name, grad in kept_grads.items():
        assert_bitwise_equal(redone_grads[name].float(), grad.float(), f"{model} {name}")
    assert redone_peak < kept_peak / 2


def test_the_comparison_sees_a_moved_gradient(fresh_seed):
    """Negative control: micro-batches of 2 instead of 4 change the weight gradients' token
    reductions, and the same comparison reports it."""
    config = load_model_config("qwen3-cut")
    _, (_, _, four) = _update(config, fresh_seed, recompute=True)
    _, (_, _, two) = _update(config, fresh_seed, recompute=True, micro_batch=2)
    assert any(not torch.equal(four[name].float(), two[name].float()) for name in four)
