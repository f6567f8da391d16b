"""The supervisor of one subprocess tool (``ep.run``), a script run on its own::

    python -I -S _supervisor.py CONTROL_FD ROOT [--pidns] [--wrapped] [--watch PATH]... -- CMD...
    python -I -S _supervisor.py --zygote CONTROL_FD

(the second form starts one supervisor per request by forking itself: see :func:`zygote`).

Theory of operation
-------------------
The sandbox starts this script with one end of a socket pair (``CONTROL_FD``) and the
tool's stdin, stdout and stderr; it imports nothing but the standard library (and the
fanotify reader of the fs oracle, by path). It

1. becomes the init of a PID namespace of its own where the machine allows (``--pidns``:
   ``unshare(CLONE_NEWPID)``, then a fork: the outer process only waits), else a
   *subreaper* (``PR_SET_CHILD_SUBREAPER``): either way every process the tool starts,
   ``setsid`` and double forks included, stays below it;
2. in its namespace, watches the filesystems of the ``--watch`` paths with fanotify
   (``oracles/fs/_fanotify.py``), whose events name a pid only for the processes of that
   namespace: what it reports is what the tool's tree did, whatever else runs;
3. starts ``CMD`` in a session of its own, hands it the stdio and lets go of its own copies
   (the call's output ends when the tool's tree closes it, not this script);
4. reports on the socket, one JSON object a line: ``ready`` (how it watches),
   ``started`` (the tool's pid), ``fs`` (changes outside ``ROOT``, and attribute changes
   inside it), ``exit`` (the tool's exit status, once its changes are all told),
   ``left`` (what still runs, when told ``list``: the call has ended), ``killed``;
5. kills the whole tree (and reports what it killed) when told ``kill``, or when the
   socket closes (the sandbox ended, or died); ends by itself once the tool and everything
   it started have ended.

A listing names what each process is at that moment (``/proc/PID/cmdline`` read then,
so after an ``exec``), leaves out processes that have ended (zombies included) and is
read again until two reads agree, so that a child forked a moment ago is named by the
program it runs, and the middle process of a double fork, which exits at once, is not
named at all.

``--wrapped``: ``CMD`` is strict egress mode's wrapper (``unshare ... _netns.py bridge
... -- TOOL``), whose bridge outlives the tool while processes it left run in its
namespace. The supervisor gives it a pipe (its number in ``LITMUS_SANDBOX_TOOL_EXIT_FD``)
on which the bridge writes the tool's own exit status: that is the tool's exit, and the
wrapper's processes (``unshare`` and the bridge) are never listed as left or killed.

Pids are the machine's (read in ``/proc``, which stays the machine's).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import json
import os
import select
import signal
import socket
import sys
from collections.abc import Mapping
from typing import Any

_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36
#: Where a wrapped command (strict mode's bridge) finds the pipe for the tool's exit status
#: (the bridge, ``oracles/egress/_netns.py``, names it too).
TOOL_EXIT_FD = "LITMUS_SANDBOX_TOOL_EXIT_FD"
#: A listing is read again until two reads agree, at most this many times, this far apart.
_LIST_READS, _LIST_GAP_S = 10, 0.01
_CLONE_NEWPID = 0x20000000
_FANOTIFY = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), os.pardir, "oracles", "fs", "_fanotify.py"
)


@functools.cache
def _load_fanotify() -> Any:
    spec = importlib.util.spec_from_file_location("_litmus_fanotify", _FANOTIFY)
    if spec is None or spec.loader is None:
        raise ImportError(_FANOTIFY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _host_pid() -> int:
    """This process's pid on the machine (``/proc`` is the machine's, not the namespace's)."""
    return int(os.readlink("/proc/self"))


def _table(ended: bool = False) -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command) of every process on the machine that runs (and of those
    that have ended and are not reaped yet too, if ``ended``)."""
    out: dict[int, tuple[int, str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read(400).replace(b"\0", b" ").strip().decode(errors="replace")
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        rest = stat[stat.rfind(")") + 2 :].split()
        if len(rest) > 1 and (ended or rest[0] not in ("Z", "X")):
            out[int(name)] = (int(rest[1]), cmd or stat[stat.find("(") + 1 : stat.rfind(")")])
    return out


def _linked(path: str) -> bool:
    """Whether ``path`` is a file with more than one link."""
    try:
        return os.lstat(path).st_nlink > 1
    except OSError:
        return False


def _descendants(
    top: int, table: dict[int, tuple[int, str]] | None = None
) -> list[tuple[int, str]]:
    table = _table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: list[tuple[int, str]] = []
    stack = list(children.get(top, ()))
    while stack:
        pid = stack.pop()
        out.append((pid, table[pid][1]))
        stack.extend(children.get(pid, ()))
    return sorted(out)


class Supervisor:
    """The init (or subreaper) side: runs the tool, watches, reports, kills."""

    def __init__(
        self,
        control: int,
        root: str,
        pidns: bool,
        watch: list[str],
        outer: int,
        wrapped: bool = False,
    ) -> None:
        self.control = control
        self.wrapped = wrapped
        self.root = root.rstrip("/") + "/"
        self.pidns = pidns
        self.me = _host_pid()
        self.watcher: Any = None
        why = "no paths to watch" if not watch else "no PID namespace of its own here"
        if watch and pidns:
            try:
                self.watcher, why = _load_fanotify().open_watcher(watch)
            except Exception as exc:  # a surprise here means no evidence, not no tool
                why = f"fanotify unavailable: {exc!r}"
        self.ready = {
            "pidns": pidns,
            "watching": self.watcher is not None,
            "why": why,
            # What to kill, should this supervisor stop answering (its namespace goes too).
            "supervisor": outer,
        }
        self.main: int | None = None
        self.main_host: int | None = None  # the machine's pid of main
        self.status: int | None = None
        self.exit_r = -1  # a wrapped command tells the tool's exit status here

    def send(self, record: dict[str, Any]) -> None:
        data = (json.dumps(record) + "\n").encode()
        try:
            while data:
                data = data[os.write(self.control, data) :]
        except OSError:  # the sandbox is gone: nobody to tell, nothing to keep running
            self.kill_all()
            os._exit(1)

    def changes(self) -> None:
        if self.watcher is None:
            return
        # Inside the root the snapshots see everything: only attributes (times set),
        # renames out of it, and writes to files with other links (they may be outside)
        # are told.
        found = [
            c
            for c in self.watcher.read()
            if c[0] == "attrib"
            or not c[1].startswith(self.root)
            or (c[2] is not None and not c[2].startswith(self.root))
            or (c[0] == "written" and _linked(c[1]))
        ]
        if found:
            self.send({"fs": found})
        if self.watcher.overflow:
            self.watcher.overflow = False
            self.send({"overflow": True})

    def tree(self) -> list[tuple[int, str]]:
        """(pid, command) of every process below this one but a wrapper's own."""
        table = _table()
        found = _descendants(self.me, table)
        main = self.main_host
        if not self.wrapped or main is None:
            return found
        # unshare, and the bridge it forked
        return [(pid, cmd) for pid, cmd in found if pid != main and table[pid][0] != main]

    def listing(self) -> list[tuple[int, str]]:
        """What still runs (see the module docstring): read until two reads agree."""
        self.reap()
        seen = self.tree()
        for _ in range(_LIST_READS):
            select.select([], [], [], _LIST_GAP_S)
            self.reap()
            now = self.tree()
            if now == seen:
                break
            seen = now
        return seen

    def kill_all(self) -> list[tuple[int, str]]:
        """Kill every process below this one, until none is left; what was killed (a
        wrapper's own processes are killed, not told)."""
        killed: list[tuple[int, str]] = []
        for _ in range(20):  # a tree that keeps forking is killed in a few rounds
            found = _descendants(self.me)
            if not found:
                break
            shown = self.tree()
            killed.extend(k for k in shown if k not in killed)
            if self.pidns:
                # Every process of the namespace (and of any below it) but this one; the
                # pids in /proc are the machine's, not the namespace's.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(-1, signal.SIGKILL)
            else:
                for pid, _ in found:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        continue
            while self.reap():
                select.select([], [], [], 0.01)
        return killed

    def reap(self) -> bool:
        """Reap what has ended; whether any process is still running below this one (all
        of them are children or descend from one: orphans come back to an init, or to a
        subreaper)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.main and self.status is None:
                self.status = os.waitstatus_to_exitcode(status)

    def run(self, cmd: list[str]) -> int:
        self.send({"ready": self.ready})
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        os.set_inheritable(self.control, False)
        env: Mapping[str, str] = os.environ
        exit_w = -1
        if self.wrapped:
            self.exit_r, exit_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            os.set_inheritable(exit_w, True)
            env = {**os.environ, TOOL_EXIT_FD: str(exit_w)}
        try:
            main = os.posix_spawnp(cmd[0], cmd, env, setsid=True)
        except OSError as exc:
            self.send({"spawn_error": [exc.errno or 0, exc.strerror or str(exc)]})
            return 127
        finally:
            if exit_w >= 0:
                os.close(exit_w)
        self.main = main
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # the tool's output ends with the tool's tree, not with us
            os.dup2(null, fd)
        os.close(null)
        self.main_host = self._host(main)
        self.send({"started": self.main_host})
        told = False
        fds = [self.control, wake_r] + ([self.watcher.fileno()] if self.watcher else [])
        if self.exit_r >= 0:
            fds.append(self.exit_r)
        while True:
            ready, _, _ = select.select(fds, [], [], 1.0)
            if wake_r in ready:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
            if self.exit_r in ready and self.tool_exited():
                fds.remove(self.exit_r)
                os.close(self.exit_r)  # told once (or never: the wrapper's exit says it)
                self.exit_r = -1
            running = self.reap()
            self.changes()
            if self.status is not None and not told:
                told = True
                self.send({"exit": self.status})
            if told and not running:
                return self.status or 0
            if self.control in ready:
                try:
                    data = os.read(self.control, 512)
                except OSError:
                    data = b""
                if not data or b"kill" in data:
                    killed = self.kill_all()
                    self.changes()
                    if data:
                        self.send({"killed": killed})
                    return self.status if self.status is not None else -signal.SIGKILL
                if b"list" in data:
                    self.send({"left": self.listing()})

    def tool_exited(self) -> bool:
        """Read the tool's exit status from a wrapped command's pipe; whether the pipe
        has said all it will."""
        try:
            data = os.read(self.exit_r, 64)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if self.status is None and data.strip().lstrip(b"-").isdigit():
            self.status = int(data)
        return True

    def _host(self, pid: int) -> int:
        """The machine's pid of our child ``pid`` (its pid in our namespace)."""
        if not self.pidns:
            return pid
        for child, _ in _descendants(self.me, _table(ended=True)):  # it may have exited
            try:
                with open(f"/proc/{child}/status", "rb") as f:
                    for line in f:
                        if line.startswith(b"NSpid:"):
                            if int(line.split()[-1]) == pid:
                                return child
                            break
            except OSError:
                continue
        return pid


def run_one(
    control: int,
    root: str,
    pidns: bool,
    watch: list[str],
    cmd: list[str],
    wrapped: bool = False,
) -> int:
    """Supervise ``cmd`` (this process has the tool's stdio, and ``control`` the socket)."""
    libc = ctypes.CDLL(None, use_errno=True)
    outer = os.getpid()
    pidns = pidns and libc.unshare(_CLONE_NEWPID) == 0
    if pidns:
        child = os.fork()
        if child:
            # The outer process: lets go of the stdio and the socket, and waits for the
            # namespace's init; killed, it takes the namespace with it (PDEATHSIG).
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.close(control)
            _, status = os.waitpid(child, 0)
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    else:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1)
    code = Supervisor(control, root, pidns, watch, outer, wrapped).run(cmd)
    return code if code >= 0 else 128 - code


def zygote(control: int) -> int:
    """Start a supervisor for each request on ``control`` (a SOCK_SEQPACKET socket), by
    forking this process: Python and its imports are paid for once per sandbox, not once
    per tool. A request is one JSON message (``cmd``, ``cwd``, ``env``, ``root``,
    ``pidns``, ``watch``) with four descriptors: the tool's stdin, stdout and stderr, and
    the run's own report socket. Ends when ``control`` closes (the sandbox is gone)."""
    with contextlib.suppress(Exception):
        _load_fanotify()  # loaded once, before any fork
    sock = socket.socket(fileno=control)
    while True:
        ready, _, _ = select.select([sock], [], [], 1.0)
        _reap_all()
        if not ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
        except OSError:
            return 0
        if not data:
            return 0
        if os.fork() == 0:
            sock.close()
            code = 1
            try:
                code = _forked(json.loads(data), fds)
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)


def _forked(request: dict[str, Any], fds: list[int]) -> int:
    """In the zygote's child: take the tool's stdio and environment, then supervise."""
    stdin, stdout, stderr, control = fds
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        if fd > 2:
            os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(request["env"])
    try:
        os.chdir(request["cwd"])
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.write(control, json.dumps({"spawn_error": [exc.errno or 0, str(exc)]}).encode())
        return 127
    return run_one(
        control,
        request["root"],
        request["pidns"],
        request["watch"],
        request["cmd"],
        bool(request.get("wrapped")),
    )


def _reap_all() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def main(argv: list[str]) -> int:
    if argv[:1] == ["--zygote"]:
        return zygote(int(argv[1]))
    split = argv.index("--")
    opts, cmd = argv[:split], argv[split + 1 :]
    watch = [opts[i + 1] for i, o in enumerate(opts) if o == "--watch"]
    return run_one(int(opts[0]), opts[1], "--pidns" in opts, watch, cmd, "--wrapped" in opts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
