"""A helper process that shares the ``lstat`` work of a full walk of a large tree.

A full verification walk is bound by one ``lstat`` system call per entry, and CPython
runs the Python half of each in one thread at a time: threads do not overlap them (git
uses threads for the same work because C can). A second process can: it lists and
``lstat``-s part of the directories (:mod:`._stat_worker`) while this process walks
the rest, then sends back compact rows that are cheap to compare with the previous
snapshot.

One helper serves the whole Python process. It is started at the first walk that wants
it, used by one walk at a time (a walk that finds it busy works alone), and stopped at
exit; it also exits by itself when this process dies (its input closes). If it fails in
any way the walk does its part itself, and after a few failures it is not started again.

``LITMUS_SANDBOX_FS_HELPER=0`` in the environment turns it off.
"""

from __future__ import annotations

import atexit
import contextlib
import marshal
import os
import select
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, cast

from litmus_sandbox.oracles.fs._stat_worker import Listing

__all__ = ["StatHelper", "helper_cpus", "shared_helper"]

_LEN = struct.Struct("<I")
_WORKER = str(Path(__file__).with_name("_stat_worker.py"))
_MAX_FAILURES = 3


def helper_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class StatHelper:
    """One helper process; see the module docstring.

    ``command`` runs the worker (default: this Python on :mod:`._stat_worker`);
    ``timeout`` is how long a walk waits for its answer before doing the share itself.
    """

    def __init__(self, command: list[str] | None = None, *, timeout: float = 60.0) -> None:
        self.command = command or [sys.executable, "-I", "-S", _WORKER]
        #: Seconds to wait for an answer before giving up on the helper (the walk goes on).
        self.timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self.owner = os.getpid()
        self._lock = threading.Lock()
        self.failures = 0
        self.requests = 0  # answered requests (for tests and benchmarks)

    @property
    def usable(self) -> bool:
        return self.failures < _MAX_FAILURES

    def try_acquire(self) -> bool:
        """Take the helper for one walk; False when another walk has it or it is broken."""
        if not self.usable:
            return False
        return self._lock.acquire(blocking=False)

    def release(self) -> None:
        self._lock.release()

    def _process(self) -> subprocess.Popen[bytes]:
        proc = self._proc
        if proc is not None and proc.poll() is not None:  # died between walks
            self.stop()
            proc = None
        if proc is None:
            proc = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
            self._proc = proc
        return proc

    def send(self, top: str, rels: list[str]) -> bool:
        """Ask for the listings of ``rels`` under ``top`` (the caller holds the helper).

        Returns False (and counts a failure) when the helper cannot be reached.
        """
        body = marshal.dumps((top, rels))
        try:
            stdin = cast(IO[bytes], self._process().stdin)
            stdin.write(_LEN.pack(len(body)) + body)
            stdin.flush()
        except (OSError, ValueError, TypeError):  # no process, a closed pipe, no executable
            self._fail()
            return False
        return True

    def receive(self) -> list[Listing] | None:
        """The answer to the last :meth:`send`; None (and a failure counted) if it broke."""
        proc = self._proc
        if proc is None:
            return None
        stdout = cast(IO[bytes], proc.stdout)
        try:
            # A worker that stopped (SIGSTOP, a hung filesystem) must not hang the walk.
            ready, _, _ = select.select([stdout], [], [], self.timeout)
            if not ready:
                raise TimeoutError(f"no answer from the stat helper in {self.timeout:g}s")
            head = stdout.read(_LEN.size)
            if len(head) == _LEN.size:
                (n,) = _LEN.unpack(head)
                body = stdout.read(n)
                if len(body) == n:
                    listings = marshal.loads(body)
                    if isinstance(listings, list):
                        self.requests += 1
                        return listings
        except (OSError, ValueError, EOFError, TypeError):  # TimeoutError is an OSError
            pass
        self._fail()
        return None

    def _fail(self) -> None:
        self.failures += 1
        self.stop()

    def stop(self) -> None:
        """Stop the process (a later walk starts a new one)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid


_shared: StatHelper | None = None
_shared_lock = threading.Lock()


def shared_helper() -> StatHelper | None:
    """The process-wide helper, or None when turned off or there is one CPU."""
    global _shared
    if os.environ.get("LITMUS_SANDBOX_FS_HELPER", "1") == "0" or helper_cpus() < 2:
        return None
    with _shared_lock:
        # A forked child must not share its parent's pipes: it gets its own helper.
        if _shared is None or _shared.owner != os.getpid():
            _shared = StatHelper()
            atexit.register(_shared.stop)
        return _shared
