"""The skill's files and the guides say only true things about this repository: every
`harness ...` command they cite parses with the real parser and names existing models,
sizes, gates, contracts and devices; every `python -m pytest` target, repository path,
relative link and `<family>.<variant>` implementation exists; every guide has its five
sections; and the cheapest cited commands actually run.

Paths under runs/ are outputs an earlier step writes (run directories, a copied contract),
so they need not exist; `<...>` in a path is a placeholder, matched as a glob.
"""
import json
import re
import shlex
from pathlib import Path

import pytest

from gates.faults import register_all
from harness.cli import _parser, main
from harness.stages import gates as gates_stage
from harness.stages import run as run_stage
from kernels.models.registry import config_name
from kernels.ops.registry import FAMILY_VARIANTS

ROOT = Path(__file__).resolve().parent.parent
SKILL_DIR = ROOT / ".claude" / "skills" / "bitwise-align"
GUIDES_DIR = ROOT / "guides"
DOCS = sorted(SKILL_DIR.glob("*.md")) + sorted(GUIDES_DIR.glob("*.md"))
GUIDES = [p for p in sorted(GUIDES_DIR.glob("*.md")) if p.name not in ("README.md", "glossary.md")]
SECTIONS = ("Symptom", "How to confirm", "Fix patterns", "Pitfalls", "How to verify")
COMMAND_BLOCKS = ("", "bash", "sh", "shell", "console")  # fenced blocks whose lines are commands
PATH_PREFIXES = ("kernels", "gates", "harness", "guides", "benchmarks", "tests", r"\.claude", r"\.agents")
REPO_PATH = re.compile(rf"(?<![\w./<>-])((?:{'|'.join(PATH_PREFIXES)})/[\w.*<>/-]*)")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
OUTPUT = "runs/"


def _ids(paths):
    return [str(p.relative_to(ROOT)) for p in paths]


def _snippets(path):
    """Code spans outside fences, and each line of command blocks: what a reader would run."""
    text, snippets = path.read_text(), []
    prose = re.sub(r"^```(\w*)\n(.*?)^```", lambda m: _fenced(m, snippets), text, flags=re.S | re.M)
    snippets += re.findall(r"`([^`\n]+)`", prose)
    return snippets


def _fenced(match, snippets):
    if match.group(1) in COMMAND_BLOCKS:
        snippets += [line for line in match.group(2).splitlines() if line.strip()]
    return ""


def _argv(snippet, program):
    """The arguments after `program` if the snippet runs it (env assignments skipped), else None."""
    try:
        words = shlex.split(snippet.removeprefix("$ "), comments=True)
    except ValueError:
        return None
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words = words[1:]
    for prefix in ([program], ["python", "-m", f"{program}.cli"], ["python", "-m", program]):
        if words[:len(prefix)] == prefix:
            return words[len(prefix):]
    return None


def _exists(path: str) -> bool:
    if path.startswith(OUTPUT):
        return True
    pattern = re.sub(r"<[^>]*>", "*", path.rstrip("/"))
    return any(ROOT.glob(pattern)) if "*" in pattern else (ROOT / pattern).exists()


def _problems(args) -> list:
    """What a parsed command names that does not exist here."""
    problems = []
    gate_lists = (getattr(args, "only", None), getattr(args, "gates", None))
    checks = [lambda g=g: gates_stage.select(g) for g in gate_lists if g]
    if getattr(args, "model", None):
        checks.append(lambda: config_name(args.model, getattr(args, "size", None) or "cut"))
    for check in checks:
        try:
            check()
        except ValueError as error:
            problems.append(str(error))
    contract = getattr(args, "contract", None)
    both = getattr(args, "verb", None) == "rl" and contract == "both"  # harness rl runs the two
    if contract and contract not in ("fast", "consistent") and not both and not _exists(contract):
        problems.append(f"contract {contract!r} is neither shipped nor a file")
    if getattr(args, "config", None) and not _exists(args.config):
        problems.append(f"config {args.config!r} does not exist")
    if getattr(args, "device", None) and args.device not in gates_stage.DEVICES:
        problems.append(f"device {args.device!r}")
    if getattr(args, "agent", None) and args.agent not in run_stage.AGENTS:
        problems.append(f"agent {args.agent!r} is not one of {run_stage.AGENTS}")
    return problems


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_cited_harness_commands_parse_and_name_what_exists(path):
    commands = [argv for argv in (_argv(s, "harness") for s in _snippets(path)) if argv]  # bare `harness`: a name
    for argv in commands:
        command = "harness " + " ".join(argv)
        try:
            args = _parser().parse_args(argv)
        except SystemExit as stop:
            if stop.code == 0 and "--help" in argv:  # argparse printed the verb's help: it parsed
                continue
            pytest.fail(f"{path.name}: `{command}` does not parse")
        assert not _problems(args), f"{path.name}: `{command}`: {_problems(args)}"
    if path.parent == SKILL_DIR or path in GUIDES:
        assert commands, f"{path.name} cites no harness command"


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_cited_pytest_targets_exist(path):
    for snippet in _snippets(path):
        argv = _argv(snippet, "pytest")
        for target in [word for word in argv or () if not word.startswith("-")]:
            file, _, node = target.partition("::")
            assert _exists(file), f"{path.name}: `{snippet}`: {file} does not exist"
            if node and not file.startswith(OUTPUT):
                assert f"def {node}" in (ROOT / file).read_text(), f"{path.name}: no test {node} in {file}"


@pytest.mark.parametrize("path", DOCS, ids=_ids(DOCS))
def test_cited_paths_links_and_implementations_exist(path):
    text = path.read_text()
    missing = [p for p in (m.rstrip(".,:;)") for m in REPO_PATH.findall(text)) if not _exists(p)]
    assert not missing, f"{path.name} cites paths that do not exist: {missing}"
    links = [link for link in LINK.findall(text) if not re.match(r"[a-z]+://", link)]
    assert not [link for link in links if not (path.parent / link).exists()], f"{path.name}: dead links"
    register_all()  # the planted variants a guide may name
    for snippet in _snippets(path):
        for family, variant in re.findall(r"^(\w+)\.(\w+)$", snippet) + re.findall(r"impl: (\w+)\.(\w+)", snippet):
            if family in FAMILY_VARIANTS and variant not in ("py", "yaml", "md"):  # rope.py is a file
                assert variant in FAMILY_VARIANTS[family], f"{path.name}: no implementation {family}.{variant}"


@pytest.mark.parametrize("path", GUIDES, ids=_ids(GUIDES))
def test_every_guide_has_the_five_sections_and_is_indexed(path):
    headings = re.findall(r"^## (.+)$", path.read_text(), flags=re.M)
    assert [h for h in headings if h in SECTIONS] == list(SECTIONS), f"{path.name}: sections {headings}"
    index = (GUIDES_DIR / "README.md").read_text()
    assert f"({path.name})" in index, f"guides/README.md does not link {path.name}"
    assert f"guides/{path.name}" in (SKILL_DIR / "SKILL.md").read_text(), f"SKILL.md does not route to {path.name}"


def test_the_cheapest_cited_commands_run(capsys):
    listing = ["gates", "--list"]
    diff = ["diff", "--model", "qwen3", "--num-sequences", "2", "--new-tokens", "4", "--json"]
    cited = [argv for path in DOCS for argv in (_argv(s, "harness") for s in _snippets(path))]
    assert listing in cited and diff in cited, "the commands run here must be ones the docs cite"
    assert main(listing) == 0
    assert capsys.readouterr().out.count("Passes when") == len(gates_stage.discover())
    assert main(diff) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["num_tokens"] == 8 and result["frac_tokens_differing"] == 0.0, result
