"""Model configs: frozen dataclasses loaded from YAML (kernels/models/configs/<name>.yaml).

`load_model_config("qwen3-cut")` or a path; the YAML's `family` picks the dataclass.
Unknown or missing fields are a ValueError naming the field.
"""
import dataclasses
from pathlib import Path

from kernels.strict_yaml import load_yaml

CONFIG_DIR = Path(__file__).parent / "configs"


def shipped_configs() -> list:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def config_from_mapping(config_class, mapping: dict, source: str = "config"):
    """Build a frozen config dataclass, rejecting unknown and missing fields by name."""
    names = {f.name for f in dataclasses.fields(config_class)}
    unknown = sorted(set(mapping) - names)
    if unknown:
        raise ValueError(f"{source}: unknown fields {unknown}")
    required = {f.name for f in dataclasses.fields(config_class)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    missing = sorted(required - set(mapping))
    if missing:
        raise ValueError(f"{source}: missing fields {missing}")
    for field in dataclasses.fields(config_class):
        if field.name in mapping:
            _check_type(source, field.name, mapping[field.name], field.type)
    config = config_class(**mapping)
    config.validate()
    return config


def _check_type(source, name, value, annotation) -> None:
    """YAML 1.1 reads `1e-6` as text and `yes` as true: say so instead of failing later."""
    expected = annotation if isinstance(annotation, type) else {"int": int, "float": float,
                                                                "bool": bool, "str": str}.get(annotation)
    ok = {int: type(value) is int, bool: type(value) is bool, str: isinstance(value, str),
          float: type(value) in (int, float)}.get(expected, True)
    if not ok:
        hint = " (YAML reads 1e-6 as text: write 1.0e-6)" if expected is float and isinstance(value, str) else ""
        raise ValueError(f"{source}: {name} must be {expected.__name__}, got {value!r}{hint}")


def load_model_config(name_or_path):
    """A shipped config by name, or a YAML file by path."""
    from kernels.models.registry import config_class_for

    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = CONFIG_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise ValueError(f"unknown model config {name_or_path!r}; shipped: {shipped_configs()}")
    mapping = load_yaml(path, "model config")
    if not isinstance(mapping, dict) or "family" not in mapping:
        raise ValueError(f"{path}: a model config is a mapping with a 'family' field")
    return config_from_mapping(config_class_for(mapping["family"]), mapping, str(path))
