"""The trainer and the GRPO loop: a step runs end to end (rollout -> update -> weight sync)
with engine and trainer log-probs bit-identical at every step; resume from a checkpoint
reproduces the uninterrupted run bit for bit; a damaged checkpoint is a clear error."""
import dataclasses
import time

import pytest
import torch

from gates.compare import assert_bitwise_equal
from kernels.contract import load_contract
from kernels.models.config import load_model_config
from kernels.trainer.checkpoint import CheckpointError
from kernels.trainer.grpo import group_advantages, policy_loss
from kernels.trainer.logprobs import ScoredSequence
from kernels.trainer.rl_loop import GRPORun, GRPOSettings
from kernels.trainer.trainer import Trainer

CONFIG = load_model_config("qwen3-cut")
SETTINGS = GRPOSettings(prompts_per_step=2, group_size=4, max_new_tokens=12, lr=3e-3)


def _settings(seed):
    return dataclasses.replace(SETTINGS, seed=seed)


def _assert_same_record(a, b, what):
    assert a.step == b.step and a.rewards == b.rewards, what
    assert_bitwise_equal(torch.tensor(a.loss), torch.tensor(b.loss), f"{what}: loss")
    for x, y in zip(a.engine_logprobs + a.trainer_logprobs, b.engine_logprobs + b.trainer_logprobs):
        assert_bitwise_equal(x, y, f"{what}: log-probs")


def test_grpo_steps_run_end_to_end_with_zero_diff(fresh_seed):
    run = GRPORun(CONFIG, load_contract("consistent"), _settings(fresh_seed))
    before = {k: v.clone() for k, v in run.trainer.weights().items()}
    for _ in range(2):
        started = time.perf_counter()
        record = run.step()
        print(f"GRPO step {record.step}: {time.perf_counter() - started:.2f} s, loss {record.loss:.3g}")
        assert len(record.engine_logprobs) == len(record.trainer_logprobs) == len(record.update_logprobs) == 8
        for index, (engine_lp, trainer_lp, update_lp) in enumerate(
                zip(record.engine_logprobs, record.trainer_logprobs, record.update_logprobs)):
            where = f"seed {fresh_seed} step {record.step} seq {index}"
            assert_bitwise_equal(engine_lp, trainer_lp, f"{where}: trainer_fwd")
            assert_bitwise_equal(engine_lp, update_lp, f"{where}: trainer_bwd (ratio exactly 1)")
    after = run.trainer.weights()
    assert any(not torch.equal(before[k], after[k]) for k in before), "the update changed nothing"
    for name, tensor in run.engine.model.state_dict().items():
        assert_bitwise_equal(tensor, after[name], f"engine weight {name} after sync")
    assert run.engine.identities() == run.trainer.identities()


def test_resume_reproduces_the_uninterrupted_run(tmp_path, fresh_seed):
    contract, settings = load_contract("consistent"), _settings(fresh_seed)
    straight = GRPORun(CONFIG, contract, settings)
    expected = [straight.step() for _ in range(3)]
    interrupted = GRPORun(CONFIG, contract, settings)
    _assert_same_record(interrupted.step(), expected[0], "step 0")
    interrupted.save(tmp_path / "ckpt")
    del interrupted
    resumed = GRPORun.resume(tmp_path / "ckpt", CONFIG, contract, settings)
    for want in expected[1:]:
        _assert_same_record(resumed.step(), want, f"seed {fresh_seed}: step {want.step} after resume")
    for name, tensor in straight.trainer.weights().items():
        assert_bitwise_equal(resumed.trainer.weights()[name], tensor, f"weight {name}")
        assert_bitwise_equal(resumed.trainer.optimizer.master[name], straight.trainer.optimizer.master[name],
                             f"master {name}")


def test_damaged_checkpoints_are_refused(tmp_path):
    contract = load_contract("consistent")
    run = GRPORun(CONFIG, contract, SETTINGS)
    path = run.save(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="other settings"):
        GRPORun.resume(path, CONFIG, contract, dataclasses.replace(SETTINGS, lr=1e-2))
    with pytest.raises(ValueError, match="under contract 'consistent', not 'fast'"):
        GRPORun.resume(path, CONFIG, load_contract("fast"), SETTINGS)
    data = bytearray((path / "model.safetensors").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (path / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="does not match the manifest"):
        GRPORun.resume(path, CONFIG, contract, SETTINGS)
    (path / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        GRPORun.resume(path, CONFIG, contract, SETTINGS)


def test_packed_and_padded_scoring_agree_bitwise(fresh_seed):
    generator = torch.Generator().manual_seed(fresh_seed)
    sequences = [ScoredSequence(tuple(torch.randint(1, 1024, (p,), generator=generator).tolist()),
                                tuple(torch.randint(1, 1024, (c,), generator=generator).tolist()), t)
                 for p, c, t in ((5, 9, 1.0), (40, 3, 0.7), (17, 20, 1.0))]
    trainer = Trainer(CONFIG, load_contract("consistent"))
    packed = trainer.score(sequences, micro_batch_size=3, layout="packed")
    padded = trainer.score(sequences, micro_batch_size=2, layout="padded")
    for a, b in zip(packed, padded):
        assert_bitwise_equal(a, b, f"seed {fresh_seed}")
    with pytest.raises(ValueError, match="layout"):
        trainer.score(sequences, layout="ragged")


def test_grpo_math():
    advantages = group_advantages([1.0, 0.0, 0.5, 0.5, 0.2, 0.2, 0.2, 0.2], group_size=4)
    assert float(advantages[:4].sum()).__abs__() < 1e-6 and torch.all(advantages[4:] == 0)
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages([1.0, 2.0], group_size=3)
    logp = [torch.tensor([-1.0, -2.0], requires_grad=True)]
    loss = policy_loss(logp, [logp[0].detach()], torch.tensor([2.0]))
    loss.backward()
    assert float(loss.detach()) == -2.0 and torch.equal(logp[0].grad, torch.tensor([-1.0, -1.0]))
    # ratio e^0.5 > 1.2 with a positive advantage: the clipped branch wins and has no gradient
    far = [torch.tensor([0.0], requires_grad=True)]
    clipped = policy_loss(far, [torch.tensor([-0.5])], torch.tensor([1.0]))
    clipped.backward()
    assert abs(float(clipped.detach()) + 1.2) < 1e-6 and float(far[0].grad) == 0.0
    with pytest.raises(ValueError, match="2 sequences, 1 old"):
        policy_loss(logp * 2, [logp[0]], torch.tensor([1.0, 1.0]))
