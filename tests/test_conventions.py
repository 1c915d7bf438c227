"""Conventions worth stating are worth a test: layer rules, no import circles, file sizes,
module docstrings, no grab-bag modules, and the README's test command being what CI runs."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kernels", "gates", "harness")
LAYERS = ("kernels", "kernels.ops", "kernels.layout", "kernels.contract", "kernels.models", "kernels.engine",
          "kernels.trainer", "gates", "harness")
"""Lowest first; a module imports from its own layer or a lower one. `kernels` alone holds the
package's root modules (strict_yaml); the layout arithmetic sits under the contract that names
it; the trainer drives the engine for rollouts (trainer/rl_loop.py), never the reverse."""
MAX_LINES = 300


def _modules(package):
    return sorted((ROOT / package).rglob("*.py"))


def _module_name(path, root=ROOT) -> str:
    name = ".".join(path.relative_to(root).with_suffix("").parts)
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def import_graph(paths, root=ROOT) -> dict:
    """{module: project modules it imports}, lazy (in-function) imports included: a lazy import
    is still a dependency, and a circle through one is still a circle."""
    names = {_module_name(p, root): p for p in paths}
    graph = {}
    for name, path in names.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.update([node.module] + [f"{node.module}.{alias.name}" for alias in node.names])
        graph[name] = sorted(t for t in targets if t in names and t != name)
    return graph


def import_circles(graph) -> list:
    """The circles of `graph`: each strongly connected set of two or more modules (Tarjan)."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members = []
            while not members or members[-1] != node:
                members.append(stack.pop())
                on_stack.discard(members[-1])
            if len(members) > 1:
                circles.append(sorted(members))
    for node in graph:
        if node not in index:
            visit(node)
    return circles


def layer_of(module: str) -> int:
    """The index in LAYERS of the deepest layer that contains `module`."""
    return max(i for i, layer in enumerate(LAYERS) if module == layer or module.startswith(layer + "."))


def upward_imports(graph) -> list:
    """(module, imported module) for every import of a higher layer than the importer's."""
    return [(module, target) for module, targets in sorted(graph.items()) for target in targets
            if layer_of(target) > layer_of(module)]


def test_imports_point_down_the_layers():
    graph = import_graph([p for package in PACKAGES for p in _modules(package)])
    assert not upward_imports(graph), upward_imports(graph)


def test_the_layer_check_finds_an_op_reaching_up_to_a_model(tmp_path):
    """Negative control: an op importing a model's store (as the Mamba ops once did) and a
    kernel module importing the gates are both reported; the model importing the op is not."""
    for folder in ("kernels/ops", "kernels/models", "gates"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "kernels/ops/scan.py").write_text("from kernels.models.state import Store\n")
    (tmp_path / "kernels/models/state.py").write_text("from kernels.ops import scan\nStore = 1\n")
    (tmp_path / "kernels/ops/norm.py").write_text("def f():\n    import gates.compare\n")
    (tmp_path / "gates/compare.py").write_text("X = 1\n")
    graph = import_graph(sorted(tmp_path.rglob("*.py")), tmp_path)
    assert upward_imports(graph) == [("kernels.ops.norm", "gates.compare"),
                                     ("kernels.ops.scan", "kernels.models.state")]


def test_no_import_circle_among_the_projects_modules():
    circles = import_circles(import_graph([p for package in PACKAGES for p in _modules(package)]))
    assert not circles, circles


def test_the_circle_finder_finds_a_circle_through_a_lazy_import(tmp_path):
    """Negative control: pkg.a imports pkg.b, which imports pkg.a inside a function (as a
    family module picking its CUDA backend did) and pkg.c at the top: one circle, a and b."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import run\n")
    (tmp_path / "pkg" / "b.py").write_text("import pkg.c\n\n\ndef run():\n    from pkg import a\n    return a\n")
    (tmp_path / "pkg" / "c.py").write_text("X = 1\n")
    graph = import_graph(sorted((tmp_path / "pkg").glob("*.py")), tmp_path)
    assert import_circles(graph) == [["pkg.a", "pkg.b"]], graph
    (tmp_path / "pkg" / "b.py").write_text("import pkg.c\n")
    assert import_circles(import_graph(sorted((tmp_path / "pkg").glob("*.py")), tmp_path)) == []


@pytest.mark.parametrize("package", PACKAGES + ("tests", "benchmarks"))
def test_modules_are_small_and_say_what_they_are(package):
    for path in _modules(package):
        if path.name == "__init__.py" and not path.read_text().strip():
            continue  # an empty package marker says nothing and needs not
        text = path.read_text()
        assert len(text.splitlines()) <= MAX_LINES, f"{path.relative_to(ROOT)} is over {MAX_LINES} lines"
        assert ast.get_docstring(ast.parse(text)), f"{path.relative_to(ROOT)} has no module docstring"
        assert path.stem not in {"utils", "common", "helpers", "misc"}, f"{path}: name it for what it holds"


TEST_AREAS = ("ops", "models", "engine", "trainer", "contract", "layout", "gates", "harness")
"""tests/<area>/ holds the tests of kernels/<area>/ or of the top-level package <area>/."""
PROJECT_WIDE_TESTS = {"test_conventions.py", "test_guides.py", "test_skill.py"}


def misplaced_tests(tests_root, project_root) -> list:
    """Test modules outside the folder that mirrors what they test."""
    misplaced = []
    for path in sorted(tests_root.rglob("test_*.py")):
        parts = path.relative_to(tests_root).parts
        area_exists = (project_root / "kernels" / parts[0]).is_dir() or (project_root / parts[0]).is_dir()
        if (parts[0] not in PROJECT_WIDE_TESTS) if len(parts) == 1 else (parts[0] not in TEST_AREAS or not area_exists):
            misplaced.append(str(path.relative_to(tests_root)))
    return misplaced


def test_tests_mirror_the_tree(tmp_path):
    assert misplaced_tests(ROOT / "tests", ROOT) == []
    (tmp_path / "tests" / "ops").mkdir(parents=True)
    (tmp_path / "kernels" / "ops").mkdir(parents=True)
    for name in ("tests/test_norm.py", "tests/ops/test_norm.py", "tests/misc/test_x.py", "tests/test_conventions.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text('"""x"""\n')
    assert misplaced_tests(tmp_path / "tests", tmp_path) == ["misc/test_x.py", "test_norm.py"]


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
        assert "Passes when" in doc and "Negative control" in doc, (
            f"{path.name}: state the pass condition and the negative control")


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
