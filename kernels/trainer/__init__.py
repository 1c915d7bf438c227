"""Trainer: per-token log-probs over packed or padded micro-batches, backward through the
consistent forward, mixed-precision AdamW, GRPO, checkpoint save and exact resume."""
