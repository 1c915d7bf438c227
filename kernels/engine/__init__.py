"""Rollout engine: paged KV cache, continuous-batching scheduler with chunked prefill,
per-request seeded sampling, and the log-prob of every sampled token."""
