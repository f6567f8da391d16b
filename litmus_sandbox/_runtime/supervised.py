"""One subprocess tool run under its supervisor: bounded output, its reports, its tree.

Theory of operation
-------------------
A :class:`SupervisedRun` starts ``_supervisor.py`` (a script, see there) with the command,
one end of a socket pair and the tool's stdio. Its pumps run in the task group of the
sandbox's :class:`~litmus_sandbox._runtime.processes.Subprocesses`, not in the call's task,
since a tool may leave processes running after it exits:

* stdout and stderr stream into an :class:`Output` each: the first ``cap`` bytes are kept
  (what the agent is shown), every byte is counted and hashed, so memory is bounded by the
  cap whatever the tool prints; once the call has ended, what processes left running
  still print is read and dropped (they never block on a full pipe);
* the reports: how the tree is watched (``ready``), what it changed on the filesystem
  (``fs``: process evidence, handed to the evidence the call collects), the tool's exit
  status (``exit``), what it left running (``left``, asked for when the call ends:
  :meth:`SupervisedRun.list_left`) and what was killed (``killed``).

The call ends when the tool's own process exits (and its last changes are told), not when
its output closes: a child holding stdout open does not hold the call. Its output is then
read until it closes, for a moment at most. The whole tree is killed when the call is
cancelled (its timeout) and, for what is left running, when the episode ends or the
sandbox closes (:meth:`SupervisedRun.kill`); a supervisor that does not answer in time is
killed with its namespace.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import anyio.abc

from litmus_sandbox._runtime import _supervisor
from litmus_sandbox.oracles import _audit as audit

SUPERVISOR = os.path.abspath(_supervisor.__file__)
#: After the tool exits, its output is read until it closes for this long at most.
SETTLE_S = 0.2
#: A supervisor told to kill its tree answers within this (else it is killed itself).
KILL_WAIT_S = 5.0


@functools.cache
def how_trees_are_watched() -> dict[str, Any]:
    """What the supervisor can do on this machine, checked once per process (blocking):
    ``pidns`` (a PID namespace of its own), ``watching`` (fanotify process evidence), and
    ``why`` not."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    probe = [sys.executable, "-I", "-S", SUPERVISOR, str(theirs.fileno()), "/nonexistent"]
    probe += ["--pidns", "--watch", "/", "--", "true"]
    with ours:
        try:
            done = subprocess.Popen(probe, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        except OSError as exc:
            return {"pidns": False, "watching": False, "why": f"cannot run the supervisor: {exc}"}
        finally:
            theirs.close()
        ours.settimeout(30)
        try:
            first = ours.makefile("rb").readline()
        except OSError:
            first = b""
        done.wait(timeout=30)
    ready: dict[str, Any] = json.loads(first).get("ready", {}) if first else {}
    return ready or {"pidns": False, "watching": False, "why": "the supervisor said nothing"}


class Output:
    """One output stream, bounded: its first ``cap`` bytes, its size and its sha256."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head = bytearray()
        self.size = 0
        self._sha = hashlib.sha256()
        self.closed = anyio.Event()

    def feed(self, data: bytes) -> None:
        self._sha.update(data)
        self.size += len(data)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += data[:room]

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()


class SupervisedRun:
    """A subprocess tool in flight (see the module docstring).

    Args:
        cmd: the command (already wrapped for strict mode, if it runs in it).
        cwd: its working directory (the sandbox root).
        env: its whole environment.
        input: bytes for its stdin (None: it reads end-of-file).
        cap: bytes of each output kept for what the agent is shown.
        root: the sandbox root, resolved (changes inside it are the snapshots' business).
        watch: paths whose filesystems the supervisor watches for process evidence
            (empty: none, as when no call collects evidence).
        wrapped: ``cmd`` is strict mode's wrapper, which tells the tool's own exit status
            and outlives it while what the tool left runs (``_supervisor --wrapped``).
        tool: the tool's own command, as records name it (default: ``cmd``).
    """

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        input: bytes | None,
        cap: int,
        root: str,
        watch: Sequence[str],
        wrapped: bool = False,
        tool: Sequence[str] | None = None,
    ) -> None:
        self.cmd = list(cmd)
        #: The tool's own command (``cmd`` without strict mode's wrapper).
        self.tool = list(cmd if tool is None else tool)
        self._wrapped = wrapped
        self._cwd, self._env, self._input = cwd, dict(env), input
        self.stdout, self.stderr = Output(cap), Output(cap)
        self._root = root
        self._watch = list(watch)
        #: The evidence of the call that started it (process evidence goes there).
        self.evidence = audit.collecting()
        self.exit_code: int | None = None
        self.pid: int | None = None
        self.ready: dict[str, Any] = {}
        self.left: list[list[Any]] = []
        self.killed: list[list[Any]] = []
        self.spawn_error: OSError | None = None
        self.exited = anyio.Event()
        self.finished = anyio.Event()  # the supervisor is gone
        self._killed = anyio.Event()
        self._listed = anyio.Event()
        self._proc: anyio.abc.Process | None = None
        self._sock: socket.socket | None = None

    async def start(self, tg: anyio.abc.TaskGroup, zygote: Zygote | None = None) -> None:
        """Start the supervisor (forked by ``zygote`` when there is one, else a process of
        its own); its pumps run in ``tg``."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        if self._input is not None:
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
        else:
            in_r, in_w = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), -1
        theirs_fds = [in_r, out_w, err_w, theirs.fileno()]
        try:
            request = {
                "cmd": self.cmd,
                "cwd": self._cwd,
                "env": self._env,
                "root": self._root,
                "pidns": True,
                "watch": self._watch,
                "wrapped": self._wrapped,
            }
            if zygote is None or not zygote.spawn(request, theirs_fds):
                options = [str(theirs.fileno()), self._root, "--pidns"]
                options += ["--wrapped"] if self._wrapped else []
                for path in self._watch:
                    options += ["--watch", path]
                self._proc = await anyio.open_process(
                    [sys.executable, "-I", "-S", SUPERVISOR, *options, "--", *self.cmd],
                    stdin=in_r,
                    stdout=out_w,
                    stderr=err_w,
                    cwd=self._cwd,
                    env=self._env,
                    pass_fds=(theirs.fileno(),),
                )
        except BaseException:
            for fd in (out_r, err_r, in_w):
                if fd >= 0:
                    os.close(fd)
            ours.close()
            raise
        finally:
            for fd in theirs_fds[:3]:
                os.close(fd)
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        tg.start_soon(self._pump, out_r, self.stdout)
        tg.start_soon(self._pump, err_r, self.stderr)
        tg.start_soon(self._reports)
        if self._input is not None and in_w >= 0:
            tg.start_soon(self._feed, in_w, self._input)

    async def wait(self) -> None:
        """Until the tool's own process has exited (and its output closed, or settled).

        Raises:
            OSError: the command could not be started (not found, not executable).
        """
        await self.exited.wait()
        if self.spawn_error is not None:
            raise self.spawn_error
        with anyio.move_on_after(SETTLE_S):
            await self.stdout.closed.wait()
            await self.stderr.closed.wait()

    async def drained(self) -> None:
        """Until the outputs have closed (shielded), for a moment at most: once the tree
        is killed, what it printed before is all read."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(SETTLE_S):
            await self.stdout.closed.wait()
            await self.stderr.closed.wait()

    async def list_left(self) -> list[list[Any]]:
        """What the tool left running, as it is now (pid and command line): asked of the
        supervisor once the call has ended, so that a child that has just forked is named
        by what it runs, and one that has just exited is not named."""
        if self.finished.is_set() or self._sock is None:
            return []
        self._listed = anyio.Event()
        try:
            self._sock.send(b"list\n")
        except OSError:  # it is going: nothing is left
            return []
        with anyio.move_on_after(KILL_WAIT_S):
            await self._listed.wait()
        return self.left

    async def kill(self) -> list[list[Any]]:
        """Kill the whole tree (shielded); what was killed."""
        with anyio.CancelScope(shield=True):
            if self.finished.is_set() or self._sock is None:
                return self.killed
            with contextlib.suppress(OSError):  # it is going already
                self._sock.send(b"kill\n")
            with anyio.move_on_after(KILL_WAIT_S):
                await self._killed.wait()
                await self.finished.wait()
            if not self.finished.is_set():
                # It does not answer: kill it, and its namespace goes (the init's PDEATHSIG).
                if self._proc is not None:
                    self._proc.kill()
                elif isinstance(pid := self.ready.get("supervisor"), int):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                with anyio.move_on_after(KILL_WAIT_S):
                    await self.finished.wait()
        return self.killed

    @property
    def lingering(self) -> bool:
        """The tool exited, and processes it started still run."""
        return self.exited.is_set() and not self.finished.is_set()

    # ------------------------------------------------------------ pumps

    async def _pump(self, fd: int, out: Output) -> None:
        """Read one of the tool's outputs into ``out`` until it closes."""
        os.set_blocking(fd, False)
        try:
            while True:
                await anyio.wait_readable(fd)
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    break
                if not data:
                    break
                out.feed(data)
        finally:
            os.close(fd)
            out.closed.set()

    async def _feed(self, fd: int, data: bytes) -> None:
        """Write ``data`` to the tool's stdin, then close it (as a pipe closed early, when
        the tool does not read it all)."""
        os.set_blocking(fd, False)
        view = memoryview(data)
        try:
            while view:
                await anyio.wait_writable(fd)
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    continue
                except OSError:
                    break
        finally:
            os.close(fd)

    async def _reports(self) -> None:
        sock = self._sock
        assert sock is not None
        buf = b""
        try:
            while True:
                try:
                    await anyio.wait_readable(sock)
                    data = sock.recv(1 << 16)
                except OSError:
                    data = b""
                if not data:
                    break
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    self._report(json.loads(line))
        finally:
            sock.close()
            if self._proc is not None:
                with anyio.CancelScope(shield=True):
                    code = await self._proc.wait()
                if self.exit_code is None and self.spawn_error is None:
                    self.exit_code = code  # it went without telling (killed, crashed)
            for evidence in self.evidence:
                if not self.ready.get("watching"):
                    evidence.processes_watched = False
            self.exited.set()
            self._killed.set()
            if not self._listed.is_set():
                self.left = []  # it ended before it answered: nothing was left
                self._listed.set()
            self.finished.set()

    def _report(self, record: dict[str, Any]) -> None:
        if "ready" in record:
            self.ready = record["ready"]
            watching = bool(self.ready.get("watching"))
            for evidence in self.evidence:
                evidence.processes_watched = watching
        elif "fs" in record:
            for op, path, dest in record["fs"]:
                for evidence in self.evidence:
                    evidence.process_event(op, path, dest)
        elif "overflow" in record:
            self.ready = {**self.ready, "watching": False, "why": "fanotify queue overflowed"}
            for evidence in self.evidence:
                evidence.processes_watched = False
        elif "started" in record:
            self.pid = int(record["started"])
        elif "exit" in record:
            self.exit_code = int(record["exit"])
            self.exited.set()
        elif "left" in record:
            self.left = record["left"]
            self._listed.set()
        elif "killed" in record:
            self.killed = record["killed"]
            self._killed.set()
        elif "spawn_error" in record:
            err, message = record["spawn_error"]
            # OSError(errno, ...) is the subclass of that errno (FileNotFoundError...).
            self.spawn_error = OSError(err, message, self.cmd[0])
            self.exited.set()


class Zygote:
    """The sandbox's one supervisor that forks the others (``_supervisor.zygote``): Python
    and its imports are paid for once per sandbox, not once per tool. Started at the first
    subprocess tool; a request it cannot take (it is gone, a message too large) falls back
    to a supervisor process of its own."""

    def __init__(self) -> None:
        self._proc: anyio.abc.Process | None = None
        self._sock: socket.socket | None = None

    async def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = await anyio.open_process(
                [sys.executable, "-I", "-S", SUPERVISOR, "--zygote", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours

    def spawn(self, request: dict[str, Any], fds: list[int]) -> bool:
        """Ask for a supervisor with the tool's stdio and report socket; whether it took it."""
        if self._sock is None:
            return False
        try:
            socket.send_fds(self._sock, [json.dumps(request).encode()], fds)
        except OSError:  # gone, or a message larger than the socket takes
            return False
        return True

    async def close(self) -> None:
        """Let it go (its supervisors run on with their own sockets) and reap it."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        proc, self._proc = self._proc, None
        if proc is not None:
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(KILL_WAIT_S):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
