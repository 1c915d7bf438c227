"""Tiny random transformers checkpoints saved to a directory, for the loader parity tests and
the commands that take `--checkpoint DIR` (no hub download)."""
import torch
import transformers

VOCAB = 512


def save_tiny_qwen3(directory, tie: bool, max_shard_size=None):
    """A tiny random Qwen3ForCausalLM saved to `directory`; norms jittered off 1.0 so that
    their multiply is exercised. Returns (directory, hf_model)."""
    torch.manual_seed(0)
    hf_config = transformers.Qwen3Config(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
        rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=tie,
        initializer_range=0.05, dtype="float32")
    hf_model = transformers.Qwen3ForCausalLM(hf_config).eval()
    with torch.no_grad():
        for param in hf_model.parameters():
            if param.dim() == 1:
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    hf_model.save_pretrained(directory, **kwargs)
    return directory, hf_model
