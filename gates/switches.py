"""The environment switches the project reads, in one table: the knobs a person may set (listed
by `harness --help`) and the plumbing the harness sets for the processes it starts. Gates and
harness read them through `switch(name)`, which knows each default and type and names the
switch when a value does not parse. The table lives on the judge's side: a default here is
one the code under test cannot change (kernels/ reads only its own, BITWISE_GEMM_TUNING and
BITWISE_PDL).
"""
import os
import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Switch:
    name: str
    default: str | None
    parse: type
    meaning: str
    set_by: str = "you"
    """"you" (a knob) or "harness" (plumbing between the harness and the processes it starts)."""


SWITCHES = {s.name: s for s in (
    Switch("BITWISE_C10_FLOOR", "0.70", float, "C10's pass floor for consistent / fast tokens per second"),
    Switch("BITWISE_C10_PAIRS", "3", int, "C10's timed pairs (baseline, candidate) before its verdict"),
    Switch("BITWISE_C10_MAX_PAIRS", None, int, "C10's most pairs while the noise interval straddles the "
           "floor (default: the larger of the pairs and 7)"),
    Switch("BITWISE_C02_DECODE_HISTORIES", None, str, "C02's decode probe histories, comma-separated (default: "
           "both sides of the first SSM chunk and key block); a short list shows C02 failing as vacuous"),
    Switch("BITWISE_C03_KEY_BLOCKS", "3", int, "how many key blocks C03's longest probe crosses; 0 shows C03 "
           "failing as vacuous"),
    Switch("BITWISE_GEMM_TUNING", None, str, "a consistent-GEMM tile table (JSON) in place of the shipped one "
           "(read by kernels/ops/gemm_tuning.py; the fast contract never reads it)"),
    Switch("BITWISE_PDL", "0", int, "1: the decode step's Triton kernels launch with programmatic dependent "
           "launch on compute capability 9+, the same bits (read by kernels/ops/pdl.py)"),
    Switch("BITWISE_AGENT_MODEL", None, str, "the model the agents run on (default: the backend's own)"),
    Switch("BITWISE_REPRO_CONTRACT", None, str, "the contract a shrunk repro runs (default: the one it was "
           "shrunk under; read by the repro file itself)"),
    Switch("BITWISE_TREE", None, str, "the tree under judgement, when the gates run from the pristine copy",
           "harness"),
    Switch("BITWISE_BASE", "HEAD", str, "the run's base commit C00 and C08 compare with", "harness"),
    Switch("BITWISE_TAMPER", None, str, "the harness's tamper report of the judged tree (JSON)", "harness"),
    Switch("BITWISE_APPARATUS", None, str, "the pristine gates the judged tree's workers run from", "harness"),
    Switch("BITWISE_VERDICT_FD", None, int, "the pipe the gate process sends its verdicts down", "harness"),
)}


def switch(name: str):
    """The switch's value from the environment, else its default (None where it has none),
    parsed; ValueError naming the switch for a value that does not parse."""
    entry = SWITCHES[name]
    raw = os.environ.get(name) or entry.default
    if raw is None:
        return None
    try:
        return entry.parse(raw)
    except ValueError as error:
        raise ValueError(f"{name}={raw!r}: not a {entry.parse.__name__} ({entry.meaning})") from error


def help_text() -> str:
    """The knobs, one per line, for `harness --help`."""
    rows = [f"  {s.name}{'=' + s.default if s.default else ''}\n" + textwrap.fill(s.meaning, 96, initial_indent=" " * 6,
                                                                               subsequent_indent=" " * 6)
            for s in SWITCHES.values() if s.set_by == "you"]
    return "environment switches:\n" + "\n".join(rows)
