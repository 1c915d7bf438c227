"""Conventions worth stating are worth a test: layer rules, file sizes, module docstrings,
no grab-bag modules, and the README's test command being what CI runs."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kernels", "gates", "harness")
MAX_LINES = 300


def _modules(package):
    return sorted((ROOT / package).rglob("*.py"))


def _imported_roots(path):
    tree = ast.parse(path.read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package, forbidden", [("kernels", {"harness", "gates"}), ("gates", {"harness"})])
def test_dependencies_point_one_way(package, forbidden):
    offenders = {str(p.relative_to(ROOT)): sorted(_imported_roots(p) & forbidden)
                 for p in _modules(package) if _imported_roots(p) & forbidden}
    assert not offenders, offenders


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_are_small_and_say_what_they_are(package):
    for path in _modules(package):
        text = path.read_text()
        assert len(text.splitlines()) <= MAX_LINES, f"{path.relative_to(ROOT)} is over {MAX_LINES} lines"
        assert ast.get_docstring(ast.parse(text)), f"{path.relative_to(ROOT)} has no module docstring"
        assert path.stem not in {"utils", "common", "helpers", "misc"}, f"{path}: name it for what it holds"


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text().splitlines()
    commands = [line for line in readme if line.startswith(".venv/") or line.startswith("python3 -m venv")]
    assert len(commands) >= 2, "the README starts with an install+run command and a test command"
    ci_lines = [line for line in (ROOT / ".ci/run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci_lines[-1] == commands[1], (ci_lines[-1], commands[1])


def test_every_gate_names_itself_and_states_its_pass_condition():
    gate_files = sorted((ROOT / "gates").glob("test_c*.py"))
    assert gate_files, "no gate modules found"
    for path in gate_files:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        number = path.name[6:8]
        assert doc.startswith(f"Gate C{number}: "), f"{path.name}: docstring must start 'Gate C{number}: '"
        assert "Passes when" in doc and "Negative control" in doc, f"{path.name}: state the pass condition and the negative control"


def test_kernels_is_this_repository_s_package_wherever_python_starts():
    """`import kernels` outside the repository (the harness's console script, an agent's
    shell) finds this package, not another distribution's top-level `kernels` (Hugging Face's,
    which transformers 5.25 requires: pyproject pins transformers below it)."""
    import subprocess
    import sys
    found = subprocess.run([sys.executable, "-c", "import kernels; print(kernels.__file__)"], cwd="/",
                           capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert found.returncode == 0, found.stderr[-1000:]
    assert Path(found.stdout.strip()).resolve().is_relative_to(ROOT), (
        f"`kernels` resolves to {found.stdout.strip()}: another installed package shadows this one")
