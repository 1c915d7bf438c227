"""The environment switch table (gates/switches.py) is the whole list: every BITWISE_ name the
gates, the harness, the kernels or the repro template read is in it, a bad value is an error
naming the switch, and `harness --help` lists the knobs."""
import re
from pathlib import Path

import pytest

from gates.switches import SWITCHES, help_text, switch
from kernels.ops import gemm_tuning

ROOT = Path(__file__).resolve().parents[2]
NAMED = re.compile(r"BITWISE_[A-Z0-9_]*[A-Z0-9]")


def _names_in(folders, root=ROOT) -> dict:
    found = {}
    for folder in folders:
        for path in (root / folder).rglob("*"):
            if path.suffix in {".py", ".j2", ".sh"}:
                for name in NAMED.findall(path.read_text()):
                    found.setdefault(name, str(path.relative_to(root)))
    return found


def test_every_switch_the_code_reads_is_in_the_table():
    missing = {name: where for name, where in _names_in(("gates", "harness", "kernels")).items()
               if name not in SWITCHES}
    assert not missing, f"switches read but not in gates/switches.py: {missing}"
    assert gemm_tuning.ENV in SWITCHES


def test_the_table_check_sees_an_unlisted_switch(tmp_path):
    """Negative control: a module reading a switch the table lacks is reported."""
    (tmp_path / "gates").mkdir()
    (tmp_path / "gates" / "sneaky.py").write_text('import os\nFLOOR = os.environ.get("BITWISE_C10_FLOOR_OVERRIDE")\n')
    assert _names_in(("gates",), tmp_path) == {"BITWISE_C10_FLOOR_OVERRIDE": "gates/sneaky.py"}


def test_a_switch_parses_its_value_or_names_itself(monkeypatch):
    monkeypatch.delenv("BITWISE_C10_FLOOR", raising=False)
    assert switch("BITWISE_C10_FLOOR") == 0.70
    monkeypatch.setenv("BITWISE_C10_FLOOR", "0.8")
    assert switch("BITWISE_C10_FLOOR") == 0.8
    monkeypatch.setenv("BITWISE_C10_PAIRS", "three")
    with pytest.raises(ValueError, match="BITWISE_C10_PAIRS='three': not a int"):
        switch("BITWISE_C10_PAIRS")
    monkeypatch.delenv("BITWISE_AGENT_MODEL", raising=False)
    assert switch("BITWISE_AGENT_MODEL") is None


def test_help_lists_the_knobs_and_not_the_plumbing(capsys):
    from harness.cli import main
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = capsys.readouterr().out
    for entry in SWITCHES.values():
        assert (entry.name in shown) == (entry.set_by == "you"), entry.name
    assert help_text() in shown
