"""A transformers save_pretrained directory as (config, weights), the loader picked by config.json's
model_type (qwen3 -> hf_checkpoint.py, nemotron_h -> hf_nemotron.py, deepseek_v4 -> hf_deepseek.py,
qwen3_5_moe and its text model -> hf_qwen3_5.py), so a command can take `--checkpoint DIR` without
being told the family. An unsupported architecture is refused by name (require_model_type's
table), never loaded as another."""
from pathlib import Path

from kernels.models.hf_checkpoint import load_hf_checkpoint, read_config_json, require_model_type
from kernels.models.hf_deepseek import load_hf_deepseek
from kernels.models.hf_nemotron import load_hf_nemotron
from kernels.models.hf_qwen3_5 import load_hf_qwen3_5

FAMILY_OF_MODEL_TYPE = {"qwen3": "qwen3", "nemotron_h": "nemotron", "deepseek_v4": "deepseek",
                        "qwen3_5_moe_text": "qwen3_5", "qwen3_5_moe": "qwen3_5"}
LOADER_OF_FAMILY = {"qwen3": load_hf_checkpoint, "nemotron": load_hf_nemotron, "deepseek": load_hf_deepseek,
                    "qwen3_5": load_hf_qwen3_5}


def checkpoint_family(directory) -> str:
    """Our family name (qwen3, nemotron, deepseek, qwen3_5) for the checkpoint's model_type; ValueError otherwise."""
    path = Path(directory)
    hf_config = read_config_json(path)
    try:  # names the architecture (Qwen3-MoE, Llama, ...) where it is known
        require_model_type(hf_config, *FAMILY_OF_MODEL_TYPE)
    except ValueError as error:
        raise ValueError(f"{path / 'config.json'}: {error}") from error
    return FAMILY_OF_MODEL_TYPE[hf_config["model_type"]]


def load_checkpoint(directory, dtype: str | None = None) -> tuple:
    """(config, state dict of detached tensors) of the checkpoint, by its model_type."""
    config, model = LOADER_OF_FAMILY[checkpoint_family(directory)](directory, dtype)
    return config, {name: tensor.detach() for name, tensor in model.state_dict().items()}
