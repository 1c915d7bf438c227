"""The consistent contract with some region x case bindings replaced, written as a YAML file
a `harness gates --contract` call takes: how the tests plant a fault."""
import yaml

from kernels.contract.contract import CONTRACT_DIR


def planted(tmp_path, remap: dict, name: str = "consistent-planted") -> str:
    """{(region, case): binding} over consistent.yaml -> the new contract's path."""
    document = yaml.safe_load((CONTRACT_DIR / "consistent.yaml").read_text())
    document["name"] = name
    for (region, case), binding in remap.items():
        document["regions"][region][case] = binding
    path = tmp_path / "planted.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)
