"""What a gate runs its checks on: the family's shipped config at a size with seeded random
weights, or, when the run was given `--checkpoint DIR`, that checkpoint's config and weights
(kernels/models/checkpoint.py picks the loader from its model_type; loaded once a process).
Gates that time or spread work over processes (C06, C10) hand their children a config path:
`subject_config_path` writes the checkpoint's config as YAML for them (weights there stay
seeded: layout and speed are judged on the architecture, and say so in their inputs).
"""
import dataclasses
import functools
from pathlib import Path

import yaml

from gates.workload import seeded_weights
from kernels.models.checkpoint import load_checkpoint
from kernels.models.config import load_model_config
from kernels.models.registry import MODEL_CONFIGS, build_model, config_name


@functools.lru_cache(maxsize=2)
def _checkpoint(directory: str) -> tuple:
    return load_checkpoint(directory)


def subject_label(gate, size: str = "cut") -> str:
    """The config's name for the gate's inputs: a shipped name, or the checkpoint's path."""
    return f"checkpoint {gate.checkpoint}" if gate.checkpoint else config_name(gate.model, size)


def subject_config(gate, size: str = "cut"):
    """The checkpoint's config, or the family's shipped one at `size`."""
    if gate.checkpoint:
        return _checkpoint(gate.checkpoint)[0]
    return load_model_config(config_name(gate.model, size))


def subject_weights(gate, config, model_seed: int = 0) -> dict:
    """The checkpoint's weights in `config`'s dtype (a gate may run it in fp32), or weights
    seeded by `model_seed`."""
    if not gate.checkpoint:
        return seeded_weights(config, model_seed)
    dtype = config.torch_dtype
    return {name: tensor.to(dtype) if tensor.is_floating_point() else tensor
            for name, tensor in _checkpoint(gate.checkpoint)[1].items()}


def subject_model(gate, config, model_seed: int = 0):
    """The model module with subject_weights loaded."""
    if not gate.checkpoint:
        return build_model(config, model_seed)
    model = build_model(config, seed=None)
    model.load_state_dict(subject_weights(gate, config, model_seed))
    return model


def subject_config_path(gate, size: str, directory) -> str:
    """A name or YAML path that load_model_config reads in a child process: the shipped
    name, or the checkpoint's config written under `directory`."""
    if not gate.checkpoint:
        return config_name(gate.model, size)
    mapping = {k: list(v) if isinstance(v, tuple) else v
               for k, v in dataclasses.asdict(subject_config(gate)).items()}
    path = Path(directory) / "checkpoint-config.yaml"
    path.write_text(yaml.safe_dump(mapping, sort_keys=True))
    return str(path)


SIZES = ("cut", "cut-quant")  # what a gate that runs every shipped size of a family runs


def shipped_sizes(model: str, checkpoint) -> list:
    """The sizes a gate that runs every shipped size runs: the cut, and the quantized cut where
    the family ships one; "checkpoint" alone with --checkpoint."""
    shipped = MODEL_CONFIGS.get(model, {"cut": None})
    return ["checkpoint"] if checkpoint else [size for size in SIZES if size in shipped]


def parametrize_sizes(metafunc):
    """A gate module's pytest_generate_tests: one run per shipped size (shipped_sizes)."""
    if "size" in metafunc.fixturenames:
        metafunc.parametrize("size", shipped_sizes(metafunc.config.getoption("--model"),
                                                   metafunc.config.getoption("--checkpoint")))
