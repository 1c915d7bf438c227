"""The /bitwise-align skill: Agent Skills front matter, one set of bytes behind both skill
paths, and its supporting files in sync with the code they describe.

The files live in .claude/skills/bitwise-align/ (real files: Claude Code has been reported
to skip symlinked skill folders and SKILL.md files); .agents/skills/bitwise-align is a
relative symlink to that folder for agents that read .agents/skills/ (README, "Using the
skill").
"""
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from harness.cli import _parser, main

ROOT = Path(__file__).resolve().parent.parent
NAME = "bitwise-align"
CANONICAL = ROOT / ".claude" / "skills" / NAME
LINKED = ROOT / ".agents" / "skills" / NAME
SPEC_FIELDS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
MAX_NAME, MAX_DESCRIPTION, MAX_BODY_LINES = 64, 1024, 500


def _front_matter(path):
    text = path.read_text()
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert match, f"{path}: must start with YAML front matter between '---' lines"
    return yaml.safe_load(match.group(1)), text[match.end():]


def _files(root):
    """{relative path: bytes} of every file under root, following symlinked folders."""
    found = {}
    for folder, _, names in os.walk(root, followlinks=True):
        for name in names:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, root)] = open(path, "rb").read()
    return found


@pytest.mark.parametrize("skill_dir", [CANONICAL, LINKED], ids=[".claude", ".agents"])
def test_front_matter_follows_the_agent_skills_format(skill_dir):
    meta, body = _front_matter(skill_dir / "SKILL.md")
    assert isinstance(meta, dict) and {"name", "description"} <= set(meta), meta
    assert set(meta) <= SPEC_FIELDS, f"fields outside the Agent Skills spec: {set(meta) - SPEC_FIELDS}"
    name, description = meta["name"], meta["description"]
    assert name == skill_dir.name, f"name {name!r} must match the folder {skill_dir.name!r}"
    assert len(name) <= MAX_NAME and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name), name
    assert isinstance(description, str) and description.strip(), "description must be a non-empty string"
    assert len(description) <= MAX_DESCRIPTION, f"description is {len(description)} chars (max {MAX_DESCRIPTION})"
    assert len(body.splitlines()) <= MAX_BODY_LINES, "keep SKILL.md lean; details go in the supporting files"


def test_both_skill_paths_resolve_to_the_same_bytes():
    canonical, linked = _files(CANONICAL), _files(LINKED)
    assert {"SKILL.md", "gates.md", "workflow.md", "commands.md"} <= set(canonical)
    assert sorted(linked) == sorted(canonical)
    assert [name for name in canonical if linked[name] != canonical[name]] == []


def test_claude_code_reads_real_files_and_no_link_dangles():
    # Claude Code's scan of .claude/skills must meet no symlink at all (the reports the README cites).
    for path in [CANONICAL, *CANONICAL.rglob("*")]:
        assert not path.is_symlink(), f"{path.relative_to(ROOT)} must be a real file or folder"
    for top in (ROOT / ".claude" / "skills", ROOT / ".agents" / "skills"):
        for folder, dirs, names in os.walk(top, followlinks=False):
            for name in dirs + names:
                path = os.path.join(folder, name)
                if os.path.islink(path):
                    target = os.readlink(path)
                    assert not os.path.isabs(target), f"{path}: use a relative link, so clones resolve it"
                    assert os.path.exists(path), f"{path} -> {target} dangles"
                    assert os.path.realpath(path).startswith(str(ROOT)), f"{path} leaves the repository"


def test_git_does_not_ignore_the_skill():
    for path in (CANONICAL / "SKILL.md", LINKED):
        ignored = subprocess.run(["git", "check-ignore", "-q", str(path.relative_to(ROOT))], cwd=ROOT)
        assert ignored.returncode == 1, f"{path.relative_to(ROOT)} is ignored by git"


GATES_BLOCK = re.compile(r"(```text\n)(.*?)(```)", re.S)


def test_gates_md_is_the_output_of_gates_list(capsys):
    assert main(["gates", "--list"]) == 0
    listed = capsys.readouterr().out
    block = GATES_BLOCK.search((CANONICAL / "gates.md").read_text())
    assert block, "gates.md must hold the `harness gates --list` output in a ```text block"
    assert block.group(2) == listed, (
        "gates.md is out of date with the gate docstrings: regenerate it with "
        "`python -m tests.test_skill` (it pastes `harness gates --list` into the block)")


def test_commands_md_lists_every_verb_and_option():
    sections = re.split(r"^## ", (CANONICAL / "commands.md").read_text(), flags=re.M)
    by_verb = {section.split("\n", 1)[0].removeprefix("harness ").strip(): section for section in sections[1:]}
    verbs = next(a for a in _parser()._actions if a.dest == "verb").choices
    assert sorted(by_verb) == sorted(verbs), "one '## harness <verb>' section per verb"
    for verb, parser in verbs.items():
        for action in parser._actions:
            names = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
            names = names or ([] if action.option_strings else [action.dest])
            for name in names:
                assert f"`{name}`" in by_verb[verb], f"commands.md: `harness {verb}` section lacks `{name}`"


if __name__ == "__main__":  # python -m tests.test_skill: regenerate gates.md's block
    import contextlib
    import io

    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        main(["gates", "--list"])
    gates_md = CANONICAL / "gates.md"
    gates_md.write_text(GATES_BLOCK.sub(lambda m: m.group(1) + captured.getvalue() + m.group(3),
                                        gates_md.read_text(), count=1))
    print(f"wrote {gates_md.relative_to(ROOT)}")
