"""YAML for contracts and configs, read strictly: a duplicated key is an error (PyYAML keeps
the last one silently), and every failure names the file."""
from pathlib import Path

import yaml


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys."""

    pass


def _mapping_without_duplicates(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def load_yaml(path: Path, what: str):
    """The parsed document; ValueError naming `what` and the path if unreadable."""
    try:
        with open(path) as stream:  # from a file, the parser's marks name it (not "<unicode string>")
            return yaml.load(stream, Loader=_StrictLoader)
    except FileNotFoundError as error:
        raise ValueError(f"{path}: no such {what} file") from error
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"cannot read {what} {path}: {error}") from error
