"""Where an agent's shell command runs: its own PID and network namespaces (util-linux
`unshare`, unprivileged through a user namespace), so nothing it starts outlives it and it
reaches no network.

The command's shell is PID 1 of a fresh PID namespace: when it exits the kernel kills every
process left in the namespace, a `setsid` daemon included (a process group alone cannot:
such a daemon leaves the group and stalled the baseline's timing after its agent ended). The
fresh network namespace has no interface up, loopback included; the agent's model endpoint
is reached by the harness process, never by the shell. Filesystem writes are not confined
here: the judge runs from its own copy of a clean checkout (harness/pristine.py).
Where user namespaces are off, `unavailable()` says why and commands run in a process group
that is killed when the command ends; the tool's answer names that, never silently.
"""
import functools
import shutil
import subprocess

NAMESPACES = ("unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--net")


@functools.cache
def unavailable() -> str | None:
    """Why commands cannot run in their own namespaces here, or None when they can."""
    if shutil.which("unshare") is None:
        return "no unshare on PATH (util-linux)"
    try:
        probe = subprocess.run([*NAMESPACES, "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unshare failed: {err}"
    return None if probe.returncode == 0 else f"unshare failed: {probe.stderr.strip()[-300:]}"


def argv(command: str) -> list:
    """The argv that runs a shell command: in its own namespaces where they are available."""
    shell = ["/bin/sh", "-c", command]
    return shell if unavailable() else [*NAMESPACES, *shell]
