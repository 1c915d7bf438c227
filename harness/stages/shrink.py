"""`harness shrink`: turn a locate result into a repro a person (or an agent) can run alone.

From LOCATE_DIR (locate.json and the door capture beside it) it writes repros/<id>/:
inputs.safetensors + door_call.json (the door's inputs and outputs on both sides),
test_repro.py (a standalone pytest that calls the op in both cases and compares the token's
bits), config.yaml (a cut model config: the divergent layer and its neighbours) and
repro.json. It then checks both claims: the repro fails on its own, and locate on the cut
config still names the same region (at the layer's index in the cut).
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from gates.baseline import judged_tree
from harness.exit_codes import EXIT_INCONCLUSIVE, EXIT_OK
from harness.stages import locate as locate_stage
from harness.workspace import current_commit, open_repo
from kernels.models.config import CONFIG_DIR

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


def read_locate(locate_dir: Path) -> dict:
    """locate.json of a divergent result from this commit; ValueError otherwise."""
    path = Path(locate_dir) / "locate.json"
    if not path.exists():
        raise ValueError(f"{locate_dir}: no locate.json (run harness locate --out {locate_dir} first)")
    result = json.loads(path.read_text())
    if result.get("status") != "divergent":
        raise ValueError(f"{path}: locate found no divergence (status {result.get('status')!r}): nothing to shrink")
    commit = current_commit(open_repo(judged_tree()))
    if result.get("commit") != commit:
        raise ValueError(f"{path}: traced at commit {str(result.get('commit'))[:12]}, this tree is at "
                         f"{commit[:12]}: locate again, the capture may not match the code")
    return result


def cut_config(result: dict, out_path: Path):
    """Write a config with the divergent layer and its neighbours; (path, layer index in the cut)."""
    source = Path(result["config"])
    mapping = yaml.safe_load((source if source.suffix in (".yaml", ".yml")
                              else CONFIG_DIR / f"{source}.yaml").read_text())
    layer = result["layer"]
    if "hybrid_override_pattern" in mapping:  # nemotron: one character per layer
        pattern = mapping["hybrid_override_pattern"]
        lo = 0 if layer is None else max(0, layer - 1)
        hi = min(len(pattern), 2 if layer is None else layer + 2)
        mapping["hybrid_override_pattern"] = pattern[lo:hi]
        cut_layer = None if layer is None else layer - lo
    else:  # layers 0 .. layer + 1: earlier layers stay, they feed the divergent one
        keep = 2 if layer is None else layer + 2
        if "layer_pattern" in mapping:  # deepseek, qwen3_5: one character per layer (deepseek's first
            mapping["layer_pattern"] = mapping["layer_pattern"][:keep]  # num_hash_layers hash-routed)
            if "num_hash_layers" in mapping:
                mapping["num_hash_layers"] = min(mapping["num_hash_layers"], len(mapping["layer_pattern"]))
        else:
            mapping["num_layers"] = min(mapping["num_layers"], keep)
        cut_layer = layer
    out_path.write_text(f"# cut around layer {layer} of {source} by harness shrink\n" + yaml.safe_dump(mapping))
    return out_path, cut_layer


def _write_repro_test(result: dict, repro_dir: Path) -> Path:
    template = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined,
                           keep_trailing_newline=True).get_template("test_repro.py.j2")
    engine_case, trainer_case = result["cases"]
    relative = repro_dir.resolve().relative_to(ROOT) if repro_dir.resolve().is_relative_to(ROOT) else repro_dir
    path = repro_dir / "test_repro.py"
    path.write_text(template.render(
        commit=result["commit"], region=result["region"], layer=result["layer"], ordinal=result["ordinal"],
        engine_case=engine_case, trainer_case=trainer_case, token=result["token"],
        contract=result["contract"], relative_dir=relative))
    return path


def run_repro(test_path: Path, contract: str | None = None) -> subprocess.CompletedProcess:
    """The repro's pytest in a fresh process, from the repository root."""
    env = None if contract is None else {**os.environ, "BITWISE_REPRO_CONTRACT": contract}
    return subprocess.run([sys.executable, "-m", "pytest", str(test_path.resolve()), "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(test_path.parent.resolve())],
                          cwd=ROOT, capture_output=True, text=True, env=env)


def shrink(locate_dir: Path, out_root: Path) -> dict:
    result = read_locate(locate_dir)
    capture = Path(locate_dir) / "capture"
    if not (capture / "door_call.json").exists():
        raise ValueError(f"{capture}: no door capture (locate's second pass did not meet the door)")
    repro_id = f"{result['region']}-layer{result['layer']}-{result['cases'][0]}"
    repro_dir = Path(out_root) / repro_id
    repro_dir.mkdir(parents=True, exist_ok=True)
    for name in ("inputs.safetensors", "door_call.json"):
        shutil.copyfile(capture / name, repro_dir / name)
    test_path = _write_repro_test(result, repro_dir)
    config_path, cut_layer = cut_config(result, repro_dir / "config.yaml")
    process = run_repro(test_path)
    cut = locate_stage.locate(result["model"], result["contract"], repro_dir / "cut_locate", config_path=config_path,
                 seed=result["seed"])
    summary = {"id": repro_id, "locate": str(Path(locate_dir) / "locate.json"), "test": str(test_path),
               "config": str(config_path), "contract": result["contract"], "region": result["region"],
               "layer": result["layer"], "cases": result["cases"], "token": result["token"],
               "repro_fails": process.returncode != 0, "repro_output": process.stdout[-3000:],
               "cut": {"layer_expected": cut_layer, "status": cut["status"], "layer": cut.get("layer"),
                       "region": cut.get("region"),
                       "confirmed": cut["status"] == "divergent" and cut.get("region") == result["region"]
                       and cut.get("layer") == cut_layer}}
    (repro_dir / "repro.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    return summary


def format_summary(summary: dict) -> str:
    cut = summary["cut"]
    return "\n".join([
        f"repro {summary['id']}: {summary['test']}",
        f"  fails on its own: {'yes' if summary['repro_fails'] else 'NO (the capture does not reproduce it)'}",
        f"  cut config {summary['config']}: " + (
            f"still diverges at layer {cut['layer']}, {cut['region']}" if cut["confirmed"] else
            f"NOT confirmed (locate on the cut: {cut['status']}, layer {cut['layer']}, {cut['region']})")])


def add_arguments(parser) -> None:
    parser.add_argument("locate_dir", help="directory holding locate.json and capture/ (harness locate --out)")
    parser.add_argument("--out", help="where repros/<id>/ goes (default: the locate dir's parent / repros)")


def run(args) -> int:
    locate_dir = Path(args.locate_dir)
    summary = shrink(locate_dir, Path(args.out) if args.out else locate_dir.resolve().parent / "repros")
    print(format_summary(summary))
    return EXIT_OK if summary["repro_fails"] and summary["cut"]["confirmed"] else EXIT_INCONCLUSIVE
