"""The activation dtypes a model config may name, by their YAML spelling. Its own module so
the family configs (qwen3.py, nemotron_config.py) need nothing from kernels/models/config.py,
whose loader reaches them through the registry."""
import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
