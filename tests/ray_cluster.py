"""A real local Ray cluster, a head and one worker node, for the tests and the benchmark
of scoring on Ray.

Each node is a ``ray start --block`` process of its own, in a session of its own: the
node's processes (GCS, raylet, workers) share its process group, so stopping the cluster
ends exactly the processes it started (``ray stop`` would end every Ray cluster on the
machine, other test sessions' included). Each node has 1 CPU (one scoring task at a time)
and a small object store. The nodes advertise 127.0.0.2: Ray replaces 127.0.0.1 with the
machine's outside address, another loopback address keeps every connection on loopback.
Readiness is the line ``ray start`` prints once its node is up, never a sleep. Ray's
own folder (its sockets among them) is a short one under ``/tmp``, removed at the end: a
Unix socket's path holds at most 107 bytes, and a test's folder is deeper than that
leaves room for.

:func:`client_pid` tells which process holds the client end of a loopback connection (a
judge request's): the test kills that worker mid-shard.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

from redis_server import free_port

HOST = "127.0.0.2"
#: Bytes of each node's object store (Ray's least is 75 MiB).
OBJECT_STORE = 80 * 1024 * 1024
START_TIMEOUT = 90.0
STOP_TIMEOUT = 10.0


def ray_binary() -> str:
    """The ``ray`` command of this interpreter's environment."""
    found = Path(sys.executable).parent / "ray"
    if found.exists():
        return str(found)
    which = shutil.which("ray")
    if which is None:
        raise RuntimeError("ray not found: the Ray tests need the extra (pip install ray)")
    return which


class RayCluster:
    """A head and ``workers`` worker nodes on this machine (see the module docstring)."""

    def __init__(self, folder: Path, env: Mapping[str, str], *, workers: int = 1) -> None:
        self.folder = folder
        self.env = {**env, "RAY_USAGE_STATS_ENABLED": "0"}
        self.workers = workers
        self.port = free_port()
        self.nodes: list[subprocess.Popen[bytes]] = []
        folder.mkdir(parents=True, exist_ok=True)
        self.temp = Path(tempfile.mkdtemp(prefix="litmus-ray-", dir="/tmp"))

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> None:
        try:
            self._node(
                "head",
                "--head",
                f"--port={self.port}",
                "--include-dashboard=false",
                f"--temp-dir={self.temp}",
            )
            for _ in range(self.workers):
                self.add_worker()
        except BaseException:
            self.stop()
            raise

    def add_worker(self) -> None:
        """Start one more worker node (the benchmark grows its cluster from the head)."""
        self._node(f"worker-{len(self.nodes)}", f"--address={self.address}")

    def _node(self, name: str, *args: str) -> None:
        log = self.folder / f"{name}.log"
        common = [
            f"--node-ip-address={HOST}",
            "--num-cpus=1",
            f"--object-store-memory={OBJECT_STORE}",
            "--disable-usage-stats",
            "--block",
        ]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [ray_binary(), "start", *args, *common],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        self.nodes.append(proc)
        deadline = time.monotonic() + START_TIMEOUT
        while b"Ray runtime started" not in log.read_bytes():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"ray start ({name}) exited {proc.returncode}:\n{log.read_text()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"ray start ({name}) not up in {START_TIMEOUT} s")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM each node's process group, then SIGKILL what is left of it."""
        for proc in reversed(self.nodes):
            _end_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for proc in reversed(self.nodes):
            with suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            _end_group(proc.pid, signal.SIGKILL)  # the node's raylet and workers too
            proc.wait()
        self.nodes = []
        shutil.rmtree(self.temp, ignore_errors=True)


def _end_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pgid, sig)


@contextmanager
def ray_cluster(folder: Path, env: Mapping[str, str], *, workers: int = 1) -> Iterator[RayCluster]:
    """A started cluster, stopped on leaving."""
    cluster = RayCluster(folder, env, workers=workers)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def client_pid(port: int) -> int | None:
    """The process holding the loopback TCP socket whose local port is ``port``."""
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                # A socket of an earlier connection on the same port, closed and
                # waiting (TIME_WAIT), has no inode (0) and no process: skip it.
                if int(fields[1].rpartition(":")[2], 16) == port and fields[9] != "0":
                    inode = fields[9]
                    break
        if inode is not None:
            break
    if inode is None:
        return None
    wanted = f"socket:[{inode}]"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # gone, or not ours to read
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == wanted:
                    return int(pid)
            except OSError:
                continue
    return None
