"""Strict egress mode, the caller's side: check it works here, and run a command in it.

Theory of operation
-------------------
:mod:`._netns` is the bridge that runs inside the empty network namespace, as a plain
script (``python -P _netns.py ...``, importing nothing of this package). This module
builds its command line (``unshare -n -p --fork --kill-child -- python -P _netns.py
bridge ...``), checks once per process that the namespace can be set up here
(:func:`strict_available` runs the bridge's own ``check``), and runs a command behind a
:class:`~._forward_proxy.ForwardProxy` listening on a Unix socket (:func:`run_strict`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence

import anyio

from litmus_sandbox._model.errors import ConfigError, UpstreamError
from litmus_sandbox.oracles.egress import _netns
from litmus_sandbox.oracles.egress._forward_proxy import ForwardProxy
from litmus_sandbox.oracles.egress._http_wire import proxy_env
from litmus_sandbox.oracles.egress._netns import DEFAULT_BRIDGE_PORT, SETUP_FAILED, SETUP_MARKER

#: The bridge script, run by path so that it imports nothing of the package.
BRIDGE = os.path.abspath(_netns.__file__)


@functools.cache
def strict_available() -> tuple[bool, str]:
    """Whether strict mode works here, and why (not); checked once per process.

    Runs the bridge's own set-up in a throwaway namespace, so the answer covers
    ``unshare`` permissions, the ``ip`` tool and the catch-all's packet socket.
    """
    if not sys.platform.startswith("linux"):
        return False, f"network namespaces need Linux (this is {sys.platform})"
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is None:
        return False, "the unshare tool (util-linux) is not installed"
    if ip is None:
        return False, "the ip tool (iproute2) is not installed"
    cmd = [*_prefix(unshare), sys.executable, "-P", BRIDGE, "check", "--ip", ip]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"cannot run unshare: {exc}"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return False, why.removeprefix(SETUP_MARKER).strip()
    return True, done.stdout.strip() or "strict mode available"


def _prefix(unshare: str) -> list[str]:
    # -p --fork: the bridge is PID 1 of a new PID namespace, so everything the tool starts
    # dies with it; --kill-child: and the bridge dies with unshare (e.g. on a timeout).
    return [unshare, "-n", "-p", "--fork", "--kill-child", "--"]


def strict_command(
    cmd: Sequence[str],
    *,
    socket_path: str,
    port: int = DEFAULT_BRIDGE_PORT,
    catch_all: bool = True,
) -> list[str]:
    """The command line that runs ``cmd`` in strict mode (see the module docstring).

    The proxy variables are not part of it: give the process ``proxy_env("127.0.0.1", port)``
    (:func:`run_strict` does).

    Raises:
        ConfigError: an empty command, or no ``unshare`` / ``ip`` on PATH.
    """
    if not cmd:
        raise ConfigError("strict mode needs a command to run")
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is None or ip is None:
        raise ConfigError("strict mode needs the unshare and ip tools (see strict_available())")
    bridge = [sys.executable, "-P", BRIDGE, "bridge", "--socket", socket_path]
    bridge += ["--port", str(port), "--ip", ip]
    if not catch_all:
        bridge.append("--no-catch-all")
    return [*_prefix(unshare), *bridge, "--", *cmd]


async def run_strict(
    cmd: Sequence[str],
    *,
    proxy: ForwardProxy,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    port: int = DEFAULT_BRIDGE_PORT,
    catch_all: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``cmd`` in an empty network namespace whose only way out is ``proxy``.

    ``proxy`` must be serving and listen on a Unix socket (``ForwardProxy(...,
    unix_path=...)``). The command gets ``env`` (default: this process's environment)
    plus the proxy variables; stdout and stderr are captured. Direct connection attempts
    are recorded by the proxy's sink with decision ``blocked``. Check
    :func:`strict_available` first and fall back to proxy variables
    (:func:`proxy_env`) where it says no.

    Raises:
        ConfigError: the proxy has no Unix socket, or the command is empty.
        UpstreamError: strict mode is unavailable here, or the namespace could not be set up.
    """
    if proxy.unix_path is None:
        raise ConfigError("run_strict needs a ForwardProxy listening on a Unix socket (unix_path=)")
    ok, why = await anyio.to_thread.run_sync(strict_available)
    if not ok:
        raise UpstreamError(f"strict egress mode is unavailable: {why}")
    command = strict_command(cmd, socket_path=proxy.unix_path, port=port, catch_all=catch_all)
    full_env = dict(os.environ if env is None else env)
    full_env.update(proxy_env("127.0.0.1", port))
    try:
        done = await anyio.run_process(command, input=input, cwd=cwd, env=full_env, check=False)
    except OSError as exc:
        raise UpstreamError(f"cannot start strict mode: {exc}") from exc
    if done.returncode == SETUP_FAILED and SETUP_MARKER.encode() in done.stderr:
        lines = done.stderr.decode(errors="replace").splitlines()
        raise UpstreamError(next(ln for ln in lines if SETUP_MARKER in ln).strip())
    return done
