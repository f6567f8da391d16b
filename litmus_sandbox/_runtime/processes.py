"""Subprocess tools (``ep.run``) and the egress proxy they go out through.

Theory of operation
-------------------
When the sandbox watches egress, it starts a loopback forward proxy on a Unix socket in a
folder of its own (:func:`socket_dir`), whose flows land in the egress probe. A
subprocess tool then runs in the sandbox root either in strict mode - its own network
namespace, whose only way out is the proxy - where the machine allows it, or with the
proxy variables set (``proxy-env``); the episode header says which, and why. Its stdout
(and stderr) is what the agent is shown, ``is_error`` when it exits non-zero; the step
records the exit code, the output sizes and their hashes.
"""

from __future__ import annotations

import contextlib
import hashlib
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

from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import Shown
from litmus_sandbox._runtime.tool_calls import capped_text
from litmus_sandbox.oracles.egress import EgressProbe, ForwardProxy, run_strict, strict_available

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
    ) -> Shown:
        """Run ``cmd`` (a runner for ``EpisodeRecorder.call_with``): what it shows.

        Raises:
            ConfigError: an empty command.
        """
        del tool, args
        if not cmd:
            raise ConfigError("run() needs a command")
        full_env = dict(os.environ if env is None else env)
        proxy = self.proxy
        if proxy is not None and self._strict:
            done = await run_strict(cmd, proxy=proxy, cwd=self.root, env=full_env, input=input)
        else:
            if proxy is not None:
                full_env.update(proxy.env())
            done = await anyio.run_process(
                cmd, input=input, cwd=self.root, env=full_env, check=False
            )
        out, err = done.stdout or b"", done.stderr or b""
        content: list[dict[str, Any]] = []
        if out:
            content.append({"type": "text", "text": capped_text(out, self.cap)})
        if err:
            content.append({"type": "text", "text": "stderr: " + capped_text(err, self.cap)})
        return Shown(
            content=tuple(content),
            is_error=done.returncode != 0,
            structured={
                "exit_code": done.returncode,
                "stdout_bytes": len(out),
                "stderr_bytes": len(err),
                "stdout_sha256": hashlib.sha256(out).hexdigest(),
                "stderr_sha256": hashlib.sha256(err).hexdigest(),
            },
        )
