"""GRPO: group-normalised advantages and the clipped policy-gradient loss.

advantage_i = (r_i - mean(group)) / (std(group) + eps); per token, ratio = exp(logp - old),
loss = -mean_seq mean_tok min(ratio * A, clip(ratio, 1-e, 1+e) * A). With one update per
step and bitwise-consistent rollout log-probs as `old`, ratio is exactly 1.
"""
import torch


def group_advantages(rewards, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """[num_sequences] advantages; sequences of one prompt are contiguous groups."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    groups = rewards.view(-1, group_size)
    centred = groups - groups.mean(dim=1, keepdim=True)
    return (centred / (groups.std(dim=1, keepdim=True, unbiased=False) + eps)).flatten()


def policy_loss(logprobs, old_logprobs, advantages, clip_eps: float = 0.2) -> torch.Tensor:
    """Scalar loss from per-sequence token log-prob tensors."""
    per_sequence = []
    for logp, old, advantage in zip(logprobs, old_logprobs, advantages):
        ratio = torch.exp(logp - old.detach())
        clipped = ratio.clamp(1 - clip_eps, 1 + clip_eps)
        per_sequence.append(-torch.minimum(ratio * advantage, clipped * advantage).mean())
    return torch.stack(per_sequence).mean()
