"""Model families and the names a user types (`--model qwen3`)."""
from kernels.models.deepseek import DeepseekModel
from kernels.models.deepseek_config import DeepseekConfig
from kernels.models.nemotron import NemotronModel
from kernels.models.nemotron_config import NemotronConfig
from kernels.models.qwen3 import Qwen3Config, Qwen3Model
from kernels.models.qwen3_5 import Qwen3_5Model
from kernels.models.qwen3_5_config import Qwen3_5Config

FAMILIES = {"qwen3": (Qwen3Config, Qwen3Model), "nemotron": (NemotronConfig, NemotronModel),
            "deepseek": (DeepseekConfig, DeepseekModel), "qwen3_5": (Qwen3_5Config, Qwen3_5Model)}

# What `--model NAME --size SIZE` loads: the cut runs the CPU gates, full is the real shape,
# wide-cut is the model at full width with a few layers (GPU gates and benchmarks; nemotron's: C06
# on NCCL). deepseek's and qwen3_5's full configs run nowhere yet: C09 checks that they load.
MODEL_CONFIGS = {
    "qwen3": {"cut": "qwen3-cut", "full": "qwen3-1.7b"},
    "nemotron": {"cut": "nemotron-cut", "cut-quant": "nemotron-cut-quant", "wide-cut": "nemotron-wide-cut",
                 "full": "nemotron-30b-a3b"},
    "deepseek": {"cut": "deepseek-cut", "cut-quant": "deepseek-cut-quant", "wide-cut": "deepseek-wide-cut",
                 "full": "deepseek-v4-flash"},
    "qwen3_5": {"cut": "qwen3_5-cut", "wide-cut": "qwen3_5-wide-cut", "full": "qwen3_5-35b-a3b"},
}


def config_class_for(family: str):
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; known: {sorted(FAMILIES)}")
    return FAMILIES[family][0]


def config_name(model: str, size: str = "cut") -> str:
    if model not in MODEL_CONFIGS:
        raise ValueError(f"unknown model {model!r}; known: {sorted(MODEL_CONFIGS)}")
    if size not in MODEL_CONFIGS[model]:
        raise ValueError(f"model {model!r} has sizes {sorted(MODEL_CONFIGS[model])}, not {size!r}")
    return MODEL_CONFIGS[model][size]


def build_model(config, seed: int | None = 0):
    """The family's model; seeded random weights unless seed is None (then uninitialised)."""
    model = FAMILIES[config.family][1](config)
    if seed is not None:
        model.init_weights(seed)
    return model
