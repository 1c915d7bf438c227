"""Commands confined: their own user, mount, PID and network namespaces (util-linux `unshare`,
unprivileged), every mount read-only but the directories named writable. Agents' commands
(harness/agents/worktree_tools.py) and the judge's workers (gates/candidate.py) run so.
The shell is PID 1 of its namespace: nothing it starts outlives it (a `setsid` daemon included)
and /proc shows no other process. No interface is up (`loopback`: lo and a private /dev/shm),
so only the harness reaches the model endpoint. A nested user namespace locks the read-only
mounts (MNT_LOCK_*): the command cannot remount or unmount them. Where this cannot be set up,
`unavailable()` says why and commands run unconfined; callers name that, never silently.
"""
import functools
import shutil
import subprocess
import sys
import tempfile

NAMESPACES = ("unshare", "--user", "--map-root-user", "--mount", "--mount-proc", "--pid", "--fork", "--kill-child",
              "--net")
# $1 the command, then the writable directories. Mount points in mountinfo escape blanks as
# octal (\040): printf %b decodes them. /proc, /sys and /dev's own mounts stay as they are.
CONFINE = (r"""
set -eu
command=$1; loopback=$2; shift 2; private=
if [ "$loopback" != no ]; then  # $loopback: the python that brings lo up (SIOCSIFFLAGS: IFF_UP | """
           r"""IFF_LOOPBACK | IFF_RUNNING)
    "$loopback" -c 'import fcntl, socket, struct; fcntl.ioctl(socket.socket(), 0x8914, """
           r"""struct.pack("16sH", b"lo", 0x49))'
    mount -t tmpfs -o size=1g tmpfs /dev/shm  # its own shared memory: nothing left for another worker
    private=/dev/shm
fi
for dir in "$@"; do mount --bind "$dir" "$dir"; done
mounts=$(cat /proc/self/mountinfo)
printf '%s\n' "$mounts" | while read -r _ _ _ _ point options _; do
    point=$(printf '%b' "$point")
    case "$point" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/pts|/dev/mqueue) continue;; esac
    keep=no
    [ "$point" = "$private" ] && continue
    for dir in "$@"; do [ "$point" = "$dir" ] && keep=yes; done
    [ "$keep" = yes ] && continue
    mount -o "remount,bind,$(printf '%s' "$options" | sed 's/^rw\(,\|$\)/ro\1/')" "$point"
done
cd "$PWD"  # the working directory again, through its writable mount
exec unshare --user --map-root-user --mount /bin/sh -c "$command"
""")


@functools.cache
def unavailable() -> str | None:
    """Why commands cannot run confined here, or None when they can."""
    if shutil.which("unshare") is None:
        return "no unshare on PATH (util-linux)"
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as scratch:
        try:
            probe = subprocess.run(argv_confined("touch probe", [scratch]), cwd=scratch, capture_output=True,
                                   text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"unshare failed: {err}"
    return None if probe.returncode == 0 else f"unshare failed: {probe.stderr.strip()[-300:]}"


def argv_confined(command: str, writable, *, loopback: bool = False) -> list:
    """`loopback`: the namespace's lo up and a private /dev/shm, for a command whose own
    processes talk over TCP (C06's gloo ranks); the namespace still has no other interface."""
    flag = sys.executable if loopback else "no"
    return [*NAMESPACES, "/bin/sh", "-c", CONFINE, "sandbox", command, flag, *map(str, writable)]


def argv(command: str, writable=()) -> list:
    """The argv that runs a shell command: confined, `writable` (absolute directories) the
    only places it can write, where confinement is available."""
    return ["/bin/sh", "-c", command] if unavailable() else argv_confined(command, writable)
