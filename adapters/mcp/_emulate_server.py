"""Server-less emulation: serve an MCP server's tools over stdio with no server at all.

Theory of operation
-------------------
``litmus-sandbox proxy mcp --policy POLICY --tools-list FILE`` with no server command runs
an :class:`EmulateServer`: the server-less replay's session (``_replay_server.py``, driven
by the relay core), with the server's answers taken from ``FILE`` instead of a recording:

* ``initialize``, ``server/discover`` and ``tools/list`` are answered with what ``FILE``
  holds: a ``tools/list`` result (``{"tools": [...]}``, as a server answers it), or an
  episode stream whose MCP episodes kept the server's answers (the stdio proxy keeps them
  in ``meta["mcp"]["server_answers"]``: record one session with the real server, emulate
  it ever after). What is missing is synthesized as in server-less replay (an
  ``initialize`` echoing the client's protocol version, a ``server/discover``).
* ``tools/call`` goes through the sandbox under the policy, whose tools must all be in a
  mode that needs no server (``emulate``, ``stub``, ``deny``): an emulated call is
  answered by the ``[emulator]``, told each tool's listing (description, input and
  output schemas). A call of a tool the listing does not name is emulated all the same,
  from its name alone (the emulator may answer with an error).

The episode says ``meta["mcp"]["serverless_emulation"] = true``; each step, as always,
says ``emulated`` with its emulator.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from litmus_sandbox import Cassette, ConfigError, Policy, Sandbox
from litmus_sandbox._model.errors import LitmusError
from litmus_sandbox._store.files import read_bounded_bytes
from litmus_sandbox.oracles._probe import Probe

from ._replay_server import ReplayServer, needs_server, recorded_answers
from ._schema import listed_tools

PathLike = str | os.PathLike[str]
#: The largest tools list file read (a listing is small; a recording may not be).
MAX_LISTING_BYTES = 64 << 20


def read_listing(path: PathLike) -> dict[str, Any]:
    """The server answers ``path`` holds: ``{"tools/list": ...}`` from a ``tools/list``
    result, or every answer an episode stream kept.

    Raises:
        ConfigError: unreadable, or neither a listing nor a recording that kept one.
    """
    where = os.fspath(path)
    try:
        data = read_bounded_bytes(where, MAX_LISTING_BYTES)
    except (OSError, LitmusError) as exc:
        raise ConfigError(f"--tools-list {where}: {exc}") from None
    try:
        whole = json.loads(data)
    except ValueError:
        whole = None
    if isinstance(whole, Mapping):
        if not isinstance(whole.get("tools"), list):
            raise ConfigError(f'--tools-list {where}: a JSON object without a "tools" list')
        return {"tools/list": dict(whole)}
    try:
        answers = recorded_answers(Cassette.from_files([where]), None)
    except LitmusError as exc:
        raise ConfigError(
            f"--tools-list {where}: not a tools/list result, nor an episode stream ({exc})"
        ) from None
    if "tools/list" not in answers:
        raise ConfigError(
            f"--tools-list {where}: no episode in it kept the server's tools/list answer "
            "(record a session with the real server through the stdio proxy first)"
        )
    return answers


class EmulateServer(ReplayServer):
    """Answer an MCP client with emulated tools, with no server behind.

    Args:
        listing: the server's answers (:func:`read_listing`), or a path to read them from.
        episodes: the episode stream the session is recorded to.
        policy: per-tool fidelity: every tool in a mode that needs no server.
        root: the sandbox root (default: cwd).
        case_id: the episode's case id (else the client's ``_meta["litmus/case_id"]``).
        agent: recorded as the episode's ``agent``.
        probes: side-effect oracles observing each call.
        fsync: fsync every record.
        cache: where emulated results are kept (default: the step-verdict cache).

    Raises:
        ConfigError: no emulator, a policy that needs a server, or an unreadable listing.
    """

    def __init__(  # the replay server's set-up, with a listing where its recording was
        self,
        listing: Mapping[str, Any] | PathLike,
        *,
        episodes: PathLike,
        policy: Policy | PathLike,
        root: PathLike | None = None,
        case_id: str | None = None,
        agent: str | None = None,
        probes: Sequence[Probe] = (),
        fsync: bool = False,
        cache: str | os.PathLike[str] | None = None,
    ) -> None:
        self._answers = dict(listing if isinstance(listing, Mapping) else read_listing(listing))
        if not isinstance(policy, Policy):
            policy = Policy.from_file(policy)
        if policy.emulator is None:
            raise ConfigError(
                "server-less emulation needs an [emulator] in the policy, and its tools "
                'in mode "emulate"'
            )
        if problems := needs_server(policy) + _replays(policy):
            raise ConfigError(
                "server-less emulation (no server command) cannot run calls for real or "
                "replay them: " + "; ".join(problems) + ' (write default = "emulate" in [tools])'
            )
        self.cassette = None
        self.case_id = case_id
        self.agent = agent
        self.session_meta = {"transport": "stdio", "serverless_emulation": True}
        self._sandbox_kw = {
            "root": Path(root) if root is not None else Path.cwd(),
            "episodes": episodes,
            "policy": policy,
            "probes": probes,
            "fsync": fsync,
            "egress": False,  # no server runs: there is no egress to see
            "cache": cache,
        }

    def answers(self, case_id: str | None) -> dict[str, Any]:
        del case_id  # one listing serves every case
        return self._answers

    def tool_names(self) -> list[str]:
        return sorted(listed_tools(self._answers.get("tools/list")))

    def prepare(self, sandbox: Sandbox) -> None:
        """The emulator is told each listed tool's entry."""
        sandbox.describe_tools(listed_tools(self._answers.get("tools/list")))


def _replays(policy: Policy) -> list[str]:
    return [f"{name!r} is in mode 'replay'" for name in policy.named("replay")]
