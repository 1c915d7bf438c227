"""The agents' worktree tools (harness/agents/worktree_tools.py): their errors and command
timeouts, and the confinement of a command: no process outlives it, no network reaches out of
it, and it writes only its worktree, the worktree's git directory and its scratch directory.
The fixtures: conftest.py."""
import os
import sys
import time
from pathlib import Path

from harness.agents.worktree_tools import worktree_tools


def test_worktree_tools_errors_and_command_timeout(worktree, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "must-not-leak")
    tools = worktree_tools(worktree, command_timeout_s=0.5)
    lines = tools["read_file"].handler({"path": "kernels/../repros/x/test_repro.py", "start_line": 3, "end_line": 4})
    assert lines == "from kernels.op import SCALE\nassert SCALE == 1.0, SCALE\n"
    assert "matches 0 times" in tools["edit_file"].handler({"path": "kernels/op.py", "old_string": "nope",
                                                           "new_string": ""})
    (worktree / "twice.txt").write_text("a a")
    assert "matches 2 times" in tools["edit_file"].handler({"path": "twice.txt", "old_string": "a", "new_string": "b"})
    assert tools["read_file"].handler({}).startswith("error: TypeError")
    assert tools["write_file"].handler({"path": "new/dir/f.txt", "content": "hi"}) == "wrote 2 chars to new/dir/f.txt"
    assert tools["list_dir"].handler({"path": "new"}) == "dir/"
    # A child of the shell holding the pipe open must not stall the timeout; the cap wins over 60 s.
    out = tools["run_command"].handler({"command": "sleep 30 & sleep 30; echo never", "timeout_s": 60})
    assert out.startswith("error: timed out after 0.5 s") and "never" not in out
    assert (tools["run_command"].handler({"command": "echo key=${ANTHROPIC_API_KEY:-unset}"})
            == "exit code: 0\nkey=unset\n")


def test_a_command_leaves_no_process_behind_and_reaches_no_network(worktree):
    """A setsid daemon (it left the process group, so a group kill misses it) dies with the
    command's PID namespace; a loopback server the test holds open is unreachable from it."""
    import socket

    from gates import confine
    assert confine.unavailable() is None, f"agents' commands must run sandboxed here: {confine.unavailable()}"
    tools = worktree_tools(worktree, command_timeout_s=30)
    marker = worktree / "daemon-was-alive"
    out = tools["run_command"].handler({"command": f"(setsid sh -c 'sleep 1; touch {marker}' &); echo started"})
    assert out == "exit code: 0\nstarted\n"
    time.sleep(2.5)
    assert not marker.exists(), "a daemon started by an agent's command outlived it"
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        probe = f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\""
        out = tools["run_command"].handler({"command": probe})
    assert not out.startswith("exit code: 0") and "Network is unreachable" in out, out


def test_a_command_writes_only_its_worktree_git_and_scratch(tmp_path):
    """Outside the agent's clone (its own git directory with it) and the command's own TMPDIR
    nothing can be written (a sibling worktree, /tmp, the virtual environment, the harness's
    git directory, whose config git would run), not even after
    remounting a mount writable (root of its namespace, it may try), a hard link to a file
    elsewhere is refused, and the agent can still commit."""
    import git

    from gates import confine
    assert confine.unavailable() is None, f"agents' commands must run confined here: {confine.unavailable()}"
    repo = git.Repo.init(tmp_path / "repo")
    (tmp_path / "repo" / "a.py").write_text("A = 1\n")
    repo.index.add(["a.py"])
    repo.index.commit("one")
    from harness.workspace import agent_clone, open_repo
    root = agent_clone(open_repo(tmp_path / "repo"), "agent", tmp_path / "wt", "HEAD")
    other = tmp_path / "other-worktree"
    other.mkdir()
    (other / "kernel.py").write_text("SAFE = True\n")
    run = worktree_tools(root, command_timeout_s=60)["run_command"].handler
    venv_site = Path(sys.prefix) / f"cheat-{os.getpid()}.pth"
    for command in (f"echo cheat > {other}/kernel.py", f"touch {venv_site}", "touch /tmp/left-behind",
                    f"ln {other}/kernel.py linked.py", f"git config -f {repo.git_dir}/config core.fsmonitor true",
                    f"mount -o remount,bind,rw / ; mount -o remount,bind,rw {other} ; echo cheat > {other}/kernel.py"):
        out = run({"command": command})
        assert not out.startswith("exit code: 0"), (command, out)
        assert "Read-only file system" in out or "cross-device" in out, (command, out)
    assert (other / "kernel.py").read_text() == "SAFE = True\n" and not venv_site.exists()
    out = run({"command": "echo t > $TMPDIR/t && cat $TMPDIR/t && echo B = 2 > b.py && git add b.py"
                          " && git -c user.name=a -c user.email=a@b commit -qm two && git log --format=%s -1"})
    assert out == "exit code: 0\nt\ntwo\n", out
    assert git.Repo(root).commit("agent").message.strip() == "two" and "fsmonitor" not in (
        Path(repo.git_dir) / "config").read_text()
