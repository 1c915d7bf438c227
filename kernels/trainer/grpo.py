"""GRPO: group-normalised advantages and the clipped policy-gradient loss.

advantage_i = (r_i - mean(group)) / (std(group) + eps), with the population std (as the
GRPO paper's normalisation; TRL uses the sample std); per token, ratio = exp(logp - old),
loss = -mean_seq mean_tok min(ratio * A, clip(ratio, 1-e, 1+e) * A). With one update per
step and bitwise-consistent rollout log-probs as `old`, ratio is exactly 1.
"""
import torch


def group_advantages(rewards, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """[num_sequences] advantages; sequences of one prompt are contiguous groups."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    if group_size <= 0:
        raise ValueError(f"group_size: must be positive, got {group_size}")
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    groups = rewards.view(-1, group_size)
    centred = groups - groups.mean(dim=1, keepdim=True)
    return (centred / (groups.std(dim=1, keepdim=True, unbiased=False) + eps)).flatten()


def policy_loss(logprobs, old_logprobs, advantages, clip_eps: float = 0.2) -> torch.Tensor:
    """Scalar loss from per-sequence token log-prob tensors."""
    if not len(logprobs) == len(old_logprobs) == len(advantages):
        raise ValueError(f"{len(logprobs)} sequences, {len(old_logprobs)} old log-probs, "
                         f"{len(advantages)} advantages")
    per_sequence = []
    for index, (logp, old, advantage) in enumerate(zip(logprobs, old_logprobs, advantages)):
        if logp.shape != old.shape or logp.numel() == 0:
            raise ValueError(f"sequence {index}: log-probs {tuple(logp.shape)} vs old {tuple(old.shape)}")
        ratio = torch.exp(logp - old.detach())
        clipped = ratio.clamp(1 - clip_eps, 1 + clip_eps)
        per_sequence.append(-torch.minimum(ratio * advantage, clipped * advantage).mean())
    return torch.stack(per_sequence).mean()
