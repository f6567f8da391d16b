"""A real ``redis-server`` on a free loopback port, for the tests of the Redis cache.

``redis-server`` comes from the system's packages (``dev.py test`` installs Debian's when
it is missing). Each :class:`RedisServer` runs in its own folder with no snapshots unless
``persist`` (then an append-only file, written through at every command, so a server
killed and started again has every write it acknowledged). Readiness is waited for by
asking the server (PING), never by sleeping.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1 (see the module docstring)."""

    def __init__(self, folder: Path, *, persist: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server not found: the Redis cache tests need it "
                "(Debian: apt-get install redis-server; dev.py test installs it)"
            )
        self.binary = binary
        self.folder = folder
        self.persist = persist
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)

    def start(self) -> None:
        options = {
            "bind": "127.0.0.1",
            "port": str(self.port),
            "dir": str(self.folder),
            "save": "",
            "appendonly": "yes" if self.persist else "no",
            "appendfsync": "always",
            "logfile": str(self.folder / "redis.log"),
            "daemonize": "no",
        }
        argv = [self.binary, *(x for name, value in options.items() for x in (f"--{name}", value))]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        probe = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
        try:
            while True:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    log = (self.folder / "redis.log").read_text(errors="replace")
                    raise RuntimeError(f"redis-server exited ({self.proc.returncode}):\n{log}")
                try:
                    if probe.ping():
                        return
                except redis.exceptions.BusyLoadingError:
                    pass  # loading its append-only file
                except redis.exceptions.ConnectionError:
                    pass  # not listening yet
                if time.monotonic() > deadline:
                    raise TimeoutError(f"redis-server on port {self.port} not ready")
                time.sleep(0.01)
        finally:
            probe.close()

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), and wait."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def crash(self) -> None:
        """SIGKILL: the server dies with no chance to write anything more."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None


@contextmanager
def redis_server(folder: Path, *, persist: bool = False) -> Iterator[RedisServer]:
    """A started server, stopped on leaving."""
    server = RedisServer(folder, persist=persist)
    server.start()
    try:
        yield server
    finally:
        server.stop()
