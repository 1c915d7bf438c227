"""Rollout-vs-trainer mismatch figures over all sampled tokens.

|dp| = |exp(logp_rollout) - exp(logp_train)| (max, mean, std), the k3 estimator of
KL(rollout || train) with r = exp(logp_train - logp_rollout): mean((r - 1) - log r), and the
fraction of tokens whose fp32 log-prob bits differ. All exactly 0 when the bits agree.
"""
import torch

from gates.compare import bit_view


def _flat(rollout_logprobs, trainer_logprobs) -> tuple:
    rollout = torch.cat([t.reshape(-1) for t in rollout_logprobs]).float()
    trainer = torch.cat([t.reshape(-1) for t in trainer_logprobs]).float()
    if rollout.shape != trainer.shape:
        raise ValueError(f"{rollout.numel()} rollout tokens vs {trainer.numel()} trainer tokens")
    return rollout, trainer


def per_token_abs_dp(rollout_logprobs, trainer_logprobs) -> list:
    """|dp| of every token, in sequence then token order (what the report plots)."""
    rollout, trainer = _flat(rollout_logprobs, trainer_logprobs)
    return (rollout.double().exp() - trainer.double().exp()).abs().tolist()


def mismatch_stats(rollout_logprobs, trainer_logprobs) -> dict:
    """Figures over the concatenated per-sequence fp32 log-prob tensors."""
    rollout, trainer = _flat(rollout_logprobs, trainer_logprobs)
    abs_dp = (rollout.double().exp() - trainer.double().exp()).abs()
    log_ratio = trainer.double() - rollout.double()
    k3 = (log_ratio.exp() - 1) - log_ratio
    differing = bit_view(rollout) != bit_view(trainer)
    count = rollout.numel()
    return {
        "max_abs_dp": float(abs_dp.max()) if count else 0.0,
        "mean_abs_dp": float(abs_dp.mean()) if count else 0.0,
        "std_abs_dp": float(abs_dp.std(unbiased=False)) if count else 0.0,
        "k3_kl": float(k3.mean()) if count else 0.0,
        "frac_tokens_differing": float(differing.double().mean()) if count else 0.0,
        "num_tokens": count,
    }
