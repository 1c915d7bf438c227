"""The tools an agent gets on its clone: read_file, list_dir, write_file, edit_file, run_command.
A path is resolved (symlinks followed, `..` collapsed) and must land inside the worktree (the
agent's own clone), else the tool answers "error: ..." and touches nothing. run_command runs
confined (gates/confine.py: nothing it starts outlives it, no network, nothing writable but the
worktree, its git directory inside it and a scratch TMPDIR removed after the command) with an
allow-listed environment (harness/secrets.py: no credential). The harness still reads the clone
only from outside and runs the gates from its own pristine copy rather than trusting these tools.
"""
import os
import signal
import subprocess
import tempfile
from pathlib import Path

from gates import confine
from harness.agents.base import Tool
from harness.secrets import allowed_environment

MAX_READ_CHARS = 100_000
MAX_OUTPUT_CHARS = 20_000


class _Outside(ValueError):
    pass


def _resolve(root: Path, path: str) -> Path:
    """`path` (relative to root, or absolute) resolved; raises _Outside if it leaves root."""
    resolved = (root / path).resolve()  # an absolute `path` replaces root in the join
    if not resolved.is_relative_to(root):
        raise _Outside(f"error: {path!r} is outside the worktree; use paths inside it")
    return resolved


def _clip_head(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more chars cut]"


def _clip_tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"[... {len(text) - limit} chars cut ...]\n" + text[-limit:]


def read_file(root: Path, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
    target = _resolve(root, path)
    if not target.is_file():
        return f"error: no file {path!r}"
    text = target.read_text(errors="replace")
    if start_line is not None or end_line is not None:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[max(start_line or 1, 1) - 1:end_line])  # 1-based, inclusive
    return _clip_head(text, MAX_READ_CHARS)


def list_dir(root: Path, path: str = ".") -> str:
    target = _resolve(root, path)
    if not target.is_dir():
        return f"error: no directory {path!r}"
    return "\n".join(p.name + ("/" if p.is_dir() else "") for p in sorted(target.iterdir())) or "(empty)"


def write_file(root: Path, path: str, content: str) -> str:
    target = _resolve(root, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    return f"wrote {len(content)} chars to {path}"


def edit_file(root: Path, path: str, old_string: str, new_string: str) -> str:
    target = _resolve(root, path)
    if not target.is_file():
        return f"error: no file {path!r}"
    text = target.read_text()
    count = text.count(old_string) if old_string else 0
    if count != 1:
        return f"error: old_string matches {count} times in {path}; it must match exactly once (add context)"
    target.write_text(text.replace(old_string, new_string, 1))
    return f"edited {path}"


def run_command(root: Path, max_timeout_s, command: str, timeout_s: float | None = None) -> str:
    """max_timeout_s: the cap in seconds, or a callable giving it now (the agent's budget left)."""
    cap = max_timeout_s() if callable(max_timeout_s) else max_timeout_s
    timeout_s = min(float(timeout_s or cap), cap)
    with tempfile.TemporaryDirectory(prefix="agent-tmp-") as scratch:
        # no credential of the harness reaches an agent's shell; its temporary files go to its own scratch
        env = allowed_environment(TMPDIR=scratch)
        writable = [Path(root).resolve(), scratch]  # an agent's clone: its commits go to its own .git
        # Own session, so the whole process group can be killed: children of the shell would
        # otherwise keep the pipe open and communicate() would wait for them. Inside its own PID
        # namespace (gates/confine.py) even a setsid daemon ends with the shell.
        proc = subprocess.Popen(confine.argv(command, writable), cwd=root, env=env, text=True, errors="replace",
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout_s)
            head = f"exit code: {proc.returncode}"
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            output, _ = proc.communicate()
            head = f"error: timed out after {timeout_s:g} s (killed)"
        _kill_group(proc.pid)  # what the shell left running in its group ends with the command
    if confine.unavailable():
        head += f" (not sandboxed: {confine.unavailable()}; its processes were killed by group)"
    return head + "\n" + _clip_tail(output, MAX_OUTPUT_CHARS)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _guarded(fn, root: Path, *bound):
    def handler(tool_input: dict) -> str:
        try:
            return fn(root, *bound, **tool_input)
        except _Outside as err:
            return str(err)
        except (OSError, ValueError, TypeError) as err:  # TypeError: missing or unknown input keys
            return f"error: {type(err).__name__}: {err}"
    return handler


def _schema(required: dict, optional: dict | None = None) -> dict:
    props = {**required, **(optional or {})}
    return {"type": "object", "properties": {k: {"type": t} for k, t in props.items()}, "required": list(required)}


def worktree_tools(worktree: Path, command_timeout_s: float, seconds_left=None) -> dict[str, Tool]:
    """The five tools, bound to `worktree`, keyed by name. With `seconds_left` (a callable: the
    agent's wall-clock budget left), a command's timeout is also cut to that (at least 1 s)."""
    root = Path(worktree).resolve()
    cap = command_timeout_s if seconds_left is None else (
        lambda: min(command_timeout_s, max(1.0, seconds_left())))
    specs = [
        (read_file, "Read a text file (path relative to the worktree); start_line/end_line "
                    "(1-based, inclusive) select a range.",
         _schema({"path": "string"}, {"start_line": "integer", "end_line": "integer"}), ()),
        (list_dir, "List a directory (default: the worktree root); directories end with '/'.",
         _schema({}, {"path": "string"}), ()),
        (write_file, "Create or overwrite a file with the given content.",
         _schema({"path": "string", "content": "string"}), ()),
        (edit_file, "Replace old_string by new_string in a file; old_string must occur exactly once.",
         _schema({"path": "string", "old_string": "string", "new_string": "string"}), ()),
        (run_command, f"Run a shell command in the worktree; returns the exit code and the output's "
                      f"tail. timeout_s is capped at {command_timeout_s:g} s.",
         _schema({"command": "string"}, {"timeout_s": "number"}), (cap,)),
    ]
    return {fn.__name__: Tool(fn.__name__, description, schema, _guarded(fn, root, *bound))
            for fn, description, schema, bound in specs}
