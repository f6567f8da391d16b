"""Subprocess tools (``ep.run``), their process trees, and the egress proxy they go out through.

Theory of operation
-------------------
When the sandbox watches egress, it starts a loopback forward proxy on a Unix socket in a
folder of its own (:func:`socket_dir`), whose flows land in the egress probe. A
subprocess tool then runs in the sandbox root either in strict mode - its own network
namespace, whose only way out is the proxy - where the machine allows it, or with the
proxy variables set (``proxy-env``); the episode header says which, and why.

Every subprocess tool runs under a supervisor (``supervised.py``, ``_supervisor.py``): in a
PID namespace of its own where the machine allows it (else below a subreaper), so that its
whole process tree is known and can be killed; with fanotify, in that namespace, telling
what the tree changed outside the root (process evidence: the call's effects there are
``process``-attributed). Its stdout (and stderr) is what the agent is shown, capped at
``max_result_bytes`` while read, ``is_error`` when it exits non-zero; the step records the
exit code, the outputs' whole sizes and hashes, and what the tool left running or had
killed (``meta["processes"]``; for a tool killed at its time limit, there too the sizes
and hashes of what it printed until then, ``output``: the agent is shown the timeout). The call ends when the tool's own process exits; what it
left running is killed when the episode ends (the ``end`` record's ``meta`` says what),
and when the sandbox closes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from litmus_sandbox._model.errors import ConfigError, UpstreamError
from litmus_sandbox._model.records import Shown
from litmus_sandbox._runtime.supervised import SupervisedRun, Zygote
from litmus_sandbox._runtime.tool_calls import Bounded, capped_text
from litmus_sandbox.oracles import _audit as audit
from litmus_sandbox.oracles.egress import (
    EgressProbe,
    ForwardProxy,
    proxy_env,
    strict_available,
    strict_command,
)
from litmus_sandbox.oracles.egress._netns import DEFAULT_BRIDGE_PORT, SETUP_FAILED, SETUP_MARKER

_SOCKET_DIR_PREFIX = "litmus-egress-"
#: A socket folder younger than this may belong to a sandbox that is still starting.
_STALE_AFTER_S = 60.0


def socket_dir() -> str:
    """A fresh folder for the egress proxy's Unix socket, after sweeping stale ones.

    A sandbox removes its folder when it closes; one killed (SIGKILL, a crash) cannot, so
    each start removes the folders whose socket no process listens on any more.
    """
    top = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(top) if n.startswith(_SOCKET_DIR_PREFIX)]
    except OSError:
        names = []
    now = time.time()
    for name in names:
        folder = os.path.join(top, name)
        try:
            st = os.lstat(folder)
        except OSError:
            continue
        if st.st_uid != os.getuid() or now - st.st_mtime < _STALE_AFTER_S:
            continue
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
            probe.settimeout(0.2)
            try:
                probe.connect(os.path.join(folder, "proxy.sock"))
                continue  # someone is listening: a live sandbox's folder
            except (ConnectionRefusedError, FileNotFoundError):
                shutil.rmtree(folder, ignore_errors=True)
    return tempfile.mkdtemp(prefix=_SOCKET_DIR_PREFIX)


class Subprocesses:
    """Runs subprocess tools in ``root``, their egress through the proxy once started.

    An async context manager (the sandbox enters it): the pumps of the runs live in its
    task group, and leaving it kills whatever the tools left running.

    Args:
        root: the working directory of every subprocess tool.
        cap: ``max_result_bytes``: the output shown is cut to this many bytes.
    """

    def __init__(self, root: Path, cap: int) -> None:
        self.root = root
        self.cap = cap
        #: The forward proxy, while the sandbox is open and watches egress.
        self.proxy: ForwardProxy | None = None
        self._strict = False
        self._tg: anyio.abc.TaskGroup | None = None
        #: Runs whose processes may still be running, by the episode that started them.
        self._runs: dict[str, list[SupervisedRun]] = {}
        self._real_root = str(root)
        self._watch: list[str] = []
        #: Forks the supervisors (started at the first subprocess tool).
        self._zygote: Zygote | None = None
        self._zygote_lock = anyio.Lock()

    async def __aenter__(self) -> Subprocesses:
        self._real_root, self._watch = await anyio.to_thread.run_sync(_where, self.root)
        self._tg = await anyio.create_task_group().__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        tg, self._tg = self._tg, None
        if tg is None:
            return
        with anyio.CancelScope(shield=True):
            for episode in list(self._runs):
                await self.end_episode(episode)
            zygote, self._zygote = self._zygote, None
            if zygote is not None:
                await zygote.close()
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)

    async def start_proxy(
        self,
        stack: AsyncExitStack,
        probe: EgressProbe,
        strict: bool | None,
        ignore: Callable[[str], None],
    ) -> dict[str, Any]:
        """Start the forward proxy of ``probe`` on ``stack``; how subprocesses go through it
        (the egress probe's ``mode`` in the episode header).

        ``strict``: True requires strict mode, False never uses it, None uses it where the
        machine allows. ``ignore`` is told of the proxy's folder (our file, not an effect).

        Raises:
            ConfigError: strict mode was required but is unavailable.
        """
        strict_ok, why = (False, "disabled (strict_egress=False)")
        if strict is not False:
            strict_ok, why = await anyio.to_thread.run_sync(strict_available)
            if strict and not strict_ok:
                raise ConfigError(f"strict egress mode was required but is unavailable: {why}")
        sock_dir = await anyio.to_thread.run_sync(socket_dir)
        stack.callback(shutil.rmtree, sock_dir, True)
        ignore(sock_dir)
        self.proxy = await stack.enter_async_context(
            ForwardProxy(probe.policy, probe.sink, unix_path=os.path.join(sock_dir, "proxy.sock"))
        )
        self._strict = strict_ok
        return {"mode": "strict"} if strict_ok else {"mode": "proxy-env", "strict_unavailable": why}

    def env(self) -> dict[str, str]:
        """Proxy variables pointing a subprocess at the proxy (empty without one)."""
        return self.proxy.env() if self.proxy is not None else {}

    async def run(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        cmd: list[str],
        input: bytes | None,
        env: Mapping[str, str] | None,
        episode_id: str = "",
        facts: dict[str, Any] | None = None,
    ) -> Bounded:
        """Run ``cmd`` (a runner for ``EpisodeRecorder.call_with``): what it shows.

        ``facts``, when given, is filled with what the step's ``meta["processes"]`` says
        (what the tool left running, what was killed), whatever way the call ends.

        Raises:
            ConfigError: an empty command, or the sandbox is not open.
            OSError: the command could not be started.
            UpstreamError: strict mode could not set its namespace up.
        """
        del tool, args
        if not cmd:
            raise ConfigError("run() needs a command")
        if self._tg is None:
            raise ConfigError("the sandbox is not open: use 'async with Sandbox(...)'")
        full_env = dict(os.environ if env is None else env)
        command = list(cmd)
        proxy = self.proxy
        strict = proxy is not None and self._strict and proxy.unix_path is not None
        if proxy is not None and strict and proxy.unix_path is not None:
            command = strict_command(cmd, socket_path=proxy.unix_path)
            full_env.update(proxy_env("127.0.0.1", DEFAULT_BRIDGE_PORT))
        elif proxy is not None:
            full_env.update(proxy.env())
        run = SupervisedRun(
            command,
            cwd=str(self.root),
            env=full_env,
            input=input,
            cap=self.cap,
            root=self._real_root,
            watch=self._watch if audit.collecting() else (),
            wrapped=strict,
            tool=cmd,
        )
        await run.start(self._tg, await self._the_zygote())
        self._runs.setdefault(episode_id, []).append(run)
        try:
            await run.wait()
            left = await run.list_left() if run.lingering else []
        except BaseException:
            killed = await run.kill()  # cancelled (a timeout), or it could not start
            if facts is not None and killed:
                facts["killed"] = killed
            if facts is not None and run.spawn_error is None:
                await run.drained()
                facts["output"] = _printed(run)  # what it printed before it was killed
            raise
        finally:
            if not run.lingering:
                self._forget(episode_id, run)
        if facts is not None and left:
            facts["left_running"] = left
        out, err = bytes(run.stdout.head), bytes(run.stderr.head)
        if strict and run.exit_code == SETUP_FAILED and SETUP_MARKER.encode() in err:
            lines = err.decode(errors="replace").splitlines()
            raise UpstreamError(next(ln for ln in lines if SETUP_MARKER in ln).strip())
        content: list[dict[str, Any]] = []
        if run.stdout.size:
            content.append({"type": "text", "text": capped_text(out, self.cap)})
        if run.stderr.size:
            content.append({"type": "text", "text": "stderr: " + capped_text(err, self.cap)})
        code = run.exit_code if run.exit_code is not None else -1
        shown = Shown(
            content=tuple(content),
            is_error=code != 0,
            structured={"exit_code": code, **_printed(run)},
        )
        return Bounded(shown)  # each stream cut to the cap already: recorded as it is

    async def _the_zygote(self) -> Zygote | None:
        """The zygote, started at the first tool (None if it cannot start: each tool then
        gets a supervisor process of its own)."""
        async with self._zygote_lock:
            if self._zygote is None:
                zygote = Zygote()
                try:
                    await zygote.start()
                except OSError:
                    return None
                self._zygote = zygote
        return self._zygote

    def _forget(self, episode_id: str, run: SupervisedRun) -> None:
        runs = self._runs.get(episode_id)
        if runs is not None and run in runs:
            runs.remove(run)
            if not runs:
                del self._runs[episode_id]

    async def end_episode(self, episode_id: str) -> list[dict[str, Any]]:
        """The episode ends: kill what its tools left running; what was killed, per run."""
        out: list[dict[str, Any]] = []
        for run in self._runs.pop(episode_id, []):
            killed = await run.kill()
            if killed:
                out.append({"cmd": run.tool, "pid": run.pid, "killed": killed})
        return out


def _printed(run: SupervisedRun) -> dict[str, Any]:
    """The whole sizes and sha256 of what ``run`` printed."""
    return {
        "stdout_bytes": run.stdout.size,
        "stderr_bytes": run.stderr.size,
        "stdout_sha256": run.stdout.sha256,
        "stderr_sha256": run.stderr.sha256,
    }


def _where(root: Path) -> tuple[str, list[str]]:
    """The sandbox root resolved, and where process evidence is looked for: the
    filesystems of the machine's root, the temp dirs, shared memory, the home directory
    and the sandbox root."""
    real = os.path.realpath(root)
    out = ["/", "/dev/shm", "/var/tmp", tempfile.gettempdir(), real]
    with contextlib.suppress(RuntimeError, KeyError):
        out.append(str(Path.home()))
    return real, [p for p in out if os.path.isdir(p)]
