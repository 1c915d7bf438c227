"""The optimizer state on the host (Trainer(optimizer_on_host=True), kernels/trainer/optim.py) moves
no bit: after two GRPO updates (the second reads moments that went to the host and back) the
weights, the fp32 master weights and both Adam moments equal the on-device optimizer's by integer
view, and its checkpointed state restores alike. The negative control: another learning rate
moves the masters, and the same comparison reports it."""
from gates.compare import assert_bitwise_equal, first_bit_difference
from kernels.models.config import load_model_config
from tests.trainer.test_trainer_memory import leaf_inputs


def _two_updates(config, seed, **options):
    trainer, sequences, advantages, old = leaf_inputs(config, seed, micro_batch=2, **options)
    for _ in range(2):
        trainer.train_step(sequences, advantages, old)
    return trainer


def _state(trainer) -> dict:
    """Every tensor the update keeps: weights, masters, moments, by name."""
    moments = trainer.optimizer.optimizer.state
    return {**{f"weight {n}": t for n, t in trainer.weights().items()},
            **{f"master {n}": m.detach() for n, m in trainer.optimizer.master.items()},
            **{f"{key} {n}": moments[m][key] for n, m in trainer.optimizer.master.items()
               for key in ("exp_avg", "exp_avg_sq")}}


def test_the_host_kept_optimizer_moves_no_bit(fresh_seed):
    config = load_model_config("nemotron-cut")  # Mamba, attention and MoE parameters
    on_device = _two_updates(config, fresh_seed)
    on_host = _two_updates(config, fresh_seed, optimizer_on_host=True)
    fresh = leaf_inputs(config, fresh_seed, optimizer_on_host=True)[0]
    moved = sum(first_bit_difference(m.detach(), fresh.optimizer.master[n].detach()) is not None
                for n, m in on_device.optimizer.master.items())
    assert moved == len(fresh.optimizer.master), f"{moved} of {len(fresh.optimizer.master)} masters moved"
    device_state, host_state = _state(on_device), _state(on_host)
    assert set(device_state) == set(host_state)
    for name, tensor in device_state.items():
        assert_bitwise_equal(host_state[name], tensor, f"{name} seed={fresh_seed}")
    assert all(m.device.type == "cpu" for m in on_host.optimizer.master.values())
    fresh.load_state(on_host.weights(), on_host.optimizer.master, on_host.optimizer.state_dict())
    for name, tensor in _state(fresh).items():
        assert_bitwise_equal(tensor, host_state[name], f"restored {name}")
    other = _two_updates(config, fresh_seed, optimizer_on_host=True, lr=2e-3)
    assert any(first_bit_difference(m.detach(), on_host.optimizer.master[n].detach()) is not None
               for n, m in other.optimizer.master.items()), "the comparison saw no change of learning rate"
