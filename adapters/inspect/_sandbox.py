"""The sandbox provider ``litmus``: another provider, with the filesystem oracle around it.

``eval(..., sandbox=("litmus", "litmus-sandbox.toml"))`` (or ``--sandbox
litmus:litmus-sandbox.toml``) overrides the task's own sandbox. The config file::

    inner = "local"              # the provider that really runs things (default "local")
    inner_config = "compose.yaml"  # its config, if it takes one (relative to this file)
    policy = "litmus.toml"       # optional: "sandbox.exec" / "sandbox.write_file" in deny mode
    root = "/srv/agent"          # optional: the host folder to watch (default: the local
                                 # provider's own folder)

Theory of operation
-------------------
``sample_init`` creates the inner provider's environments and wraps each, then logs an
``InfoEvent(source="litmus-sandbox")`` with ``{"litmus": {"setup": {"oracles",
"tool_modes"}}}``: each probe's description (the first environment's is ``fs``) and the
policy's modes of ``sandbox.exec`` and ``sandbox.write_file``, which the episode's header
takes (``_setup.py``). A wrapped
environment runs an :class:`~litmus_sandbox.FsProbe` over its root, if it has one on this
host: around each ``exec`` and ``write_file`` a window is opened and closed, and the
effects seen go into an ``InfoEvent(source="litmus-sandbox")`` logged where the operation
ran: inside the tool's span when a tool ran it, so the import and the recorder hooks put
them on that tool-call step (``effects.fs``). Operations outside any tool span (Inspect's
own probes) land outside every step. ``read_file`` and everything else pass through. A
policy's ``deny`` on ``sandbox.exec`` or ``sandbox.write_file`` raises ``PermissionError``
(a tool error the agent sees). ``sample_cleanup`` stops the probes, then the inner
provider cleans up.
"""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal, overload

import msgspec
from inspect_ai.log import transcript
from inspect_ai.util import ExecResult, SandboxConnection, SandboxEnvironment, sandboxenv
from inspect_ai.util._sandbox.environment import SandboxEnvironmentConfigType
from inspect_ai.util._sandbox.registry import registry_find_sandboxenv

from litmus_sandbox import ConfigError, FsProbe, Policy

from ._steps import INFO_SOURCE, as_json
from ._tool import resolve_policy


class LitmusSandboxConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``litmus`` provider's config file (TOML), paths resolved."""

    inner: str = "local"
    inner_config: str | None = None
    policy: str | None = None
    root: str | None = None


def read_config(config: SandboxEnvironmentConfigType | None) -> LitmusSandboxConfig:
    """The provider's config: none (all defaults), or the path of its TOML file.

    Raises:
        ConfigError: an unreadable file, bad TOML, an unknown key.
    """
    if config is None:
        return LitmusSandboxConfig()
    if not isinstance(config, str):
        raise ConfigError("the litmus sandbox takes a config file path (TOML)")
    path = Path(config)
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
        parsed = msgspec.convert(data, LitmusSandboxConfig)
    except (OSError, tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise ConfigError(f"{config}: {exc}") from None
    here = path.parent

    def near(value: str | None) -> str | None:
        return None if value is None else str(here / value)

    return msgspec.structs.replace(
        parsed,
        inner_config=near(parsed.inner_config),
        policy=near(parsed.policy),
        root=near(parsed.root),
    )


def _inner_type(config: LitmusSandboxConfig) -> type[SandboxEnvironment]:
    if config.inner == "litmus":
        raise ConfigError("the litmus sandbox cannot wrap itself (inner = 'litmus')")
    return registry_find_sandboxenv(config.inner)


#: The operations a policy can deny, by the names its ``[tools]`` table gives them.
_OPERATIONS = ("sandbox.exec", "sandbox.write_file")


@sandboxenv(name="litmus")
class LitmusSandboxEnvironment(SandboxEnvironment):
    """An inner provider's environment, its filesystem effects attributed to tool calls."""

    def __init__(self, inner: SandboxEnvironment, probe: FsProbe | None, policy: Policy) -> None:
        super().__init__()
        self.inner = inner
        self._probe = probe
        self._policy = policy
        self._ops = 0

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        cfg = read_config(config)
        await _inner_type(cfg).task_init(task_name, cfg.inner_config)

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        cfg = read_config(config)
        policy = resolve_policy(cfg.policy) if cfg.policy else Policy()
        if emulated := [op for op in _OPERATIONS if policy.for_tool(op).mode == "emulate"]:
            # Said, not guessed: the operations run in the sandbox this one wraps.
            raise ConfigError(
                f"the litmus sandbox cannot emulate {', '.join(emulated)}: its operations "
                "run in the sandbox it wraps (give them mode real or deny)"
            )
        inner = await _inner_type(cfg).sample_init(task_name, cfg.inner_config, metadata)
        out: dict[str, SandboxEnvironment] = {}
        oracles: dict[str, Any] = {}
        for name, env in inner.items():
            root = cfg.root or _host_root(env)
            probe = None
            if root is not None:
                probe = FsProbe(root, tripwires=(), use_watchdog=False)
                await probe.start()
                # The first environment (Inspect's default) is "fs", as a Sandbox's probe.
                oracles["fs" if not oracles else f"fs:{name}"] = probe.describe()
            out[name] = cls(env, probe, policy)
        setup: dict[str, Any] = {"oracles": oracles}
        if cfg.policy:
            setup["tool_modes"] = {op: policy.for_tool(op).mode for op in _OPERATIONS}
        # In the sample's transcript: its episode's header says how it was measured.
        transcript().info({"litmus": {"setup": setup}}, source=INFO_SOURCE)
        return out

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        cfg = read_config(config)
        inner: dict[str, SandboxEnvironment] = {}
        for name, env in environments.items():
            if isinstance(env, LitmusSandboxEnvironment):
                if env._probe is not None:
                    await env._probe.close()
                inner[name] = env.inner
            else:
                inner[name] = env
        await _inner_type(cfg).sample_cleanup(task_name, cfg.inner_config, inner, interrupted)

    @classmethod
    async def task_cleanup(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool
    ) -> None:
        cfg = read_config(config)
        await _inner_type(cfg).task_cleanup(task_name, cfg.inner_config, cleanup)

    @contextlib.asynccontextmanager
    async def _observed(self, operation: str) -> AsyncIterator[None]:
        """Refuse ``operation`` if the policy denies it; else watch the root around it."""
        tool_policy = self._policy.for_tool(f"sandbox.{operation}")
        if tool_policy.mode == "deny":
            raise PermissionError(tool_policy.message)
        probe = self._probe
        if probe is None:
            yield
            return
        self._ops += 1
        window = f"{operation}:{self._ops}"
        await probe.before_call(window)
        try:
            yield
        finally:
            effects = await probe.after_call(window)
            if effects.fs:
                transcript().info(
                    {
                        "litmus": {
                            "operation": operation,
                            "effects": {"fs": as_json(effects.fs)},
                        }
                    },
                    source=INFO_SOURCE,
                )

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,  # noqa: ASYNC109 - the signature Inspect defines
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        async with self._observed("exec"):
            return await self.inner.exec(
                cmd,
                input=input,
                cwd=cwd,
                env=env,
                user=user,
                timeout=timeout,
                timeout_retry=timeout_retry,
                concurrency=concurrency,
            )

    async def write_file(self, file: str, contents: str | bytes) -> None:
        async with self._observed("write_file"):
            await self.inner.write_file(file, contents)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        if text:
            return await self.inner.read_file(file, text=True)
        return await self.inner.read_file(file, text=False)

    async def connection(self, *, user: str | None = None) -> SandboxConnection:
        return await self.inner.connection(user=user)

    def default_polling_interval(self) -> float:
        return self.inner.default_polling_interval()


def _host_root(env: SandboxEnvironment) -> str | None:
    """The host folder an environment works in, when it has one (the local provider's)."""
    directory: Any = getattr(env, "directory", None)
    name = getattr(directory, "name", None)
    return name if isinstance(name, str) and os.path.isdir(name) else None
