"""``litmus-sandbox proxy mcp``: the command-line face of the MCP proxy.

The package's CLI (an edge too) adds this parser under ``proxy`` and calls :func:`run`.
stdout belongs to the protocol in stdio mode: everything the proxy says goes to stderr.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio

from litmus_sandbox import Cassette, ConfigError, Policy
from litmus_sandbox._model.errors import leaf_errors
from litmus_sandbox._model.safe_text import for_terminal
from litmus_sandbox.oracles._probe import Probe

from ._http import HttpProxy
from ._relay import DEFAULT_MAX_MESSAGE_BYTES
from ._replay_server import ReplayServer
from ._stdio import StdioProxy

DEFAULT_EPISODES = "litmus-mcp.episodes.jsonl"
T = TypeVar("T")

USAGE_EPILOG = """\
stdio:  litmus-sandbox proxy mcp [options] -- SERVER_COMMAND...
HTTP:   litmus-sandbox proxy mcp [options] --listen 127.0.0.1:PORT --upstream URL
replay: litmus-sandbox proxy mcp [options] --replay EPISODES   (no server at all)
emulate without a server: litmus-sandbox proxy mcp --policy P --tools-list FILE

With --replay and no server command, the recorded session is served over stdio with no
server: initialize, server/discover and tools/list get the recorded server's answers
(the stdio proxy records them; else a minimal synthesized answer: the tools the
recording called, without schemas or descriptions),
tools/call gets the recorded results; a call the recording cannot serve gets an isError
result and a divergence on its step (`litmus-sandbox replay --check EPISODES` reports it).

Tools the policy puts in mode "emulate" are answered by its [emulator] (a model), told
each tool's entry of the server's tools/list; with a server command the server still
answers everything else. With --tools-list and no server command, no server is started:
initialize, server/discover and tools/list are answered from FILE (a tools/list result,
or an episode stream that recorded one), and every tool must be in a mode that needs no
server (emulate, stub, deny).

The case id comes from --case-id, else from _meta["litmus/case_id"] on the client's
first requests (initialize, server/discover, tools/list, tools/call), else "mcp-session".
"""


#: Seconds a tools/call may go unanswered: a hung server must not hang the client.
DEFAULT_TIMEOUT = 60.0


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse ``litmus-sandbox proxy ARGS...``; bad usage exits 2 with one line."""
    from litmus_sandbox._cli.parser import Parser  # exits 2, like every other command

    parser = Parser(prog="litmus-sandbox proxy", description="record existing tool servers")
    kinds = parser.add_subparsers(dest="kind", required=True, parser_class=Parser)
    add_parser(kinds)
    return parser.parse_args(argv)


def add_parser(sub: Any) -> None:
    """Add the ``mcp`` subcommand to ``sub`` (the ``proxy`` subparsers)."""
    p: argparse.ArgumentParser = sub.add_parser(
        "mcp",
        help="record an MCP server's tool calls (stdio or streamable HTTP)",
        epilog=USAGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--policy", metavar="FILE", help="policy file; its [tools] table applies")
    p.add_argument(
        "--episodes",
        metavar="FILE",
        default=DEFAULT_EPISODES,
        help=f"episode stream to append to (default {DEFAULT_EPISODES})",
    )
    p.add_argument("--case-id", metavar="ID", help="the episode's case id")
    p.add_argument("--agent", metavar="NAME", help="recorded as the episode's agent")
    p.add_argument(
        "--root", metavar="DIR", help="sandbox root; the stdio server's working directory"
    )
    p.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="a tools/call unanswered this long gets an error, the server is told it was "
        f"cancelled, and the episode is aborted (default {DEFAULT_TIMEOUT:g}; 0: wait forever)",
    )
    p.add_argument(
        "--env",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="set a variable in the stdio server's environment (repeatable)",
    )
    p.add_argument(
        "--watch-fs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the filesystem oracle watches the root, so effects land on each step "
        "(default: on with --root, off when the root is just the working directory)",
    )
    p.add_argument(
        "--egress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give the stdio server the proxy variables of a recording loopback proxy, "
        "deciding by the policy's [egress] table (allow everything without one); "
        "--no-egress starts the server with its environment untouched (default: on)",
    )
    p.add_argument(
        "--replay",
        metavar="EPISODES",
        action="append",
        default=[],
        help="recorded episodes serving tools in replay mode (default mode replay if no "
        "--policy); with no server command, the whole session is served from them",
    )
    p.add_argument(
        "--replay-order",
        choices=["strict", "per_tool", "any"],
        help="how replayed calls match the recording (overrides [replay] order; default any)",
    )
    p.add_argument(
        "--replay-on-miss",
        choices=["error", "spy", "record-new"],
        help="what a call the recording cannot serve does (overrides [replay] on_miss)",
    )
    p.add_argument(
        "--replay-ignore",
        metavar="PATH",
        action="append",
        default=[],
        help="an argument path that never matters when matching, e.g. '$._meta' (repeatable)",
    )
    p.add_argument(
        "--max-message-bytes",
        metavar="N",
        type=int,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        help="the largest JSON-RPC message either side may send: a client's larger message "
        "gets an error, a server's cuts it off, and the episode ends aborted "
        f"(default {DEFAULT_MAX_MESSAGE_BYTES} = 64 MiB; at least 1024)",
    )
    p.add_argument(
        "--tools-list",
        metavar="FILE",
        help="with no server command: emulate a server whose tools/list this is (a JSON "
        "tools/list result, or an episode stream that recorded one); starts no server",
    )
    p.add_argument(
        "--cache",
        metavar="PATH|URL",
        help="where emulated tools' results are kept (a path, sqlite:///PATH, redis://...; "
        "default $LITMUS_CACHE, else the user's cache folder)",
    )
    p.add_argument("--fsync", action="store_true", help="fsync every record")
    p.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="the event loop the proxy runs on: uvloop (the mcp extra installs it; faster "
        "per message), the standard library's asyncio loop, or auto: uvloop when it is "
        "installed, else asyncio (default auto)",
    )
    p.add_argument("--listen", metavar="HOST:PORT", help="serve streamable HTTP here")
    p.add_argument("--upstream", metavar="URL", help="the MCP server's streamable-HTTP endpoint")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the stdio server's command line")
    p.set_defaults(func=run)


def _env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--env expects KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"--listen expects HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def _egress(args: argparse.Namespace, policy: Policy | None) -> dict[str, Any] | None:
    """The egress policy for a stdio server: the policy file's ``[egress]`` table (read
    with the policy), or allow-and-record everything; None with ``--no-egress``."""
    table = policy.egress if policy is not None else None
    if not args.egress:
        if table is not None:
            raise ConfigError(f"--no-egress, but {args.policy} has an [egress] table")
        return None
    return table if table is not None else {}


def _policy(args: argparse.Namespace) -> Policy | None:
    tuning = args.replay_order or args.replay_on_miss or args.replay_ignore
    if tuning and not args.replay:
        raise ConfigError("--replay-order, --replay-on-miss and --replay-ignore need --replay")
    if args.policy:
        policy = Policy.from_file(args.policy)
    elif args.replay:
        # Replay with no policy file means: serve every tool from the recordings.
        policy = Policy(default="replay")
    else:
        return None
    if tuning:
        policy = policy.with_replay(
            order=args.replay_order, on_miss=args.replay_on_miss, ignore=args.replay_ignore
        )
    return policy


def _probes(args: argparse.Namespace, root: Path) -> list[Probe]:
    watch = args.watch_fs if args.watch_fs is not None else args.root is not None
    if not watch:
        return []
    from litmus_sandbox.oracles.fs import FsProbe

    return [FsProbe(root, ignore=[Path(args.episodes).resolve()])]


async def _on_signal(action: Callable[[str], None]) -> None:
    """Call ``action(reason)`` at the first SIGINT or SIGTERM."""
    # Installed explicitly: a proxy started in the background of a script inherits
    # SIGINT ignored, and SIGTERM would otherwise kill it without ending its episodes.
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            action(f"the proxy was stopped by {signal.Signals(signum).name}")
            return


async def _serve_http(proxy: HttpProxy, host: str, port: int) -> int:
    async with anyio.create_task_group() as tg:
        # A signal cuts the run short: calls in flight and waiting requests are answered
        # -32000, and the open episodes end aborted with the signal as their reason.
        tg.start_soon(_on_signal, proxy.stop)
        bound = await tg.start(proxy.serve, host, port)
        print(
            f"litmus-sandbox: MCP proxy on http://{host}:{bound}{proxy.endpoint} "
            f"-> {proxy.upstream}, recording to {proxy.episodes}",
            file=sys.stderr,
            flush=True,
        )
        await proxy.stopped.wait()
        tg.cancel_scope.cancel()
    return 130 if proxy.stop_reason is not None else 0


async def _serve_stdio(proxy: StdioProxy | ReplayServer) -> int:
    code = 130
    async with anyio.create_task_group() as tg:
        # A signal ends the session early: the episode is recorded as aborted, with the
        # signal as its reason (the replay server, which runs nothing, just stops).
        if isinstance(proxy, StdioProxy):
            tg.start_soon(_on_signal, proxy.stop)
        else:
            tg.start_soon(_on_signal, lambda _reason: tg.cancel_scope.cancel())
        code = await proxy.serve_stdio()
        tg.cancel_scope.cancel()
    return code


def _backend_options(loop: str) -> dict[str, Any]:
    """anyio's asyncio options for ``--loop``: uvloop if asked for (or, with auto, if it
    imports), else the standard library's loop."""
    if loop == "asyncio":
        return {}
    try:
        import uvloop  # noqa: F401 - only whether it imports
    except ImportError:
        if loop == "uvloop":
            raise ConfigError(
                "--loop uvloop: uvloop is not installed (pip install 'litmus-sandbox[mcp]')"
            ) from None
        return {}
    return {"use_uvloop": True}


def _run(fn: Callable[..., Awaitable[T]], *args: Any, loop: str = "auto") -> T:
    """``anyio.run`` on the loop ``--loop`` picks, with a lone error out of a task group
    unwrapped for the CLI's handler."""
    options = _backend_options(loop)
    try:
        return anyio.run(fn, *args, backend="asyncio", backend_options=options)
    except BaseExceptionGroup as group:
        leaves = leaf_errors(group)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise


def run(args: argparse.Namespace) -> int:
    """Run the proxy the parsed arguments describe; returns the exit status.

    Raises:
        ConfigError: contradictory or malformed options, an unusable policy file.
    """
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if args.timeout is not None and args.timeout < 0:
        raise ConfigError("--timeout must be a positive number of seconds (or 0: no limit)")
    if args.timeout == 0:
        args.timeout = None
    if args.max_message_bytes < 1024:
        raise ConfigError("--max-message-bytes must be at least 1024")
    _backend_options(args.loop)  # --loop uvloop without uvloop: refused before anything starts
    if args.case_id is not None and not args.case_id.strip():
        raise ConfigError("--case-id must not be empty (leave it out for the client's _meta)")
    root = Path(args.root) if args.root else Path.cwd()
    policy = _policy(args)
    if policy is not None:
        policy.require_recordings(bool(args.replay))
    probes = _probes(args, root)
    cassette = None
    if args.replay:
        # Read here, not by the proxy, so that what the reader tolerated is said on stderr.
        cassette = Cassette.from_files(args.replay, fsync=args.fsync)
        for w in cassette.warnings:
            print(for_terminal(f"litmus-sandbox: {w}"), file=sys.stderr)
    if args.tools_list:
        return _emulate_only(args, command, policy, root, probes)
    common: dict[str, Any] = {
        "cache": args.cache,
        "episodes": args.episodes,
        "policy": policy,
        "root": root,
        "case_id": args.case_id,
        "agent": args.agent,
        "timeout": args.timeout,
        "probes": probes,
        "replay": cassette,
        "fsync": args.fsync,
    }
    if args.listen or args.upstream:
        if command:
            raise ConfigError("give either a server command (stdio) or --listen/--upstream")
        if not (args.listen and args.upstream):
            raise ConfigError("streamable HTTP needs both --listen HOST:PORT and --upstream URL")
        if args.env:
            raise ConfigError("--env applies to a stdio server the proxy starts")
        host, port = _listen(args.listen)
        http = HttpProxy(args.upstream, max_message_bytes=args.max_message_bytes, **common)
        return _run(_serve_http, http, host, port, loop=args.loop)
    if not command and args.replay:
        if args.env:
            raise ConfigError("--env applies to a server the proxy starts; replay starts none")
        assert cassette is not None
        server = ReplayServer(
            cassette,
            **{k: common[k] for k in ("episodes", "policy", "root", "case_id", "agent", "probes")},
            fsync=args.fsync,
            cache=args.cache,
        )
        served: int = _run(_serve_stdio, server, loop=args.loop)
        print(
            f"litmus-sandbox: server-less replay of {', '.join(args.replay)} "
            f"recorded in {args.episodes}",
            file=sys.stderr,
        )
        return served
    if not command:
        raise ConfigError(
            "no MCP server command: put it after --, use --listen/--upstream, "
            "or serve a recording with --replay EPISODES"
        )
    egress = _egress(args, policy)
    proxy = StdioProxy(
        command,
        env=_env(args.env),
        egress=egress,
        max_message_bytes=args.max_message_bytes,
        **common,
    )
    if egress is not None:
        print(
            "litmus-sandbox: the server's egress goes through a recording loopback proxy "
            "(proxy variables: a long-lived server is not run in strict mode, so a client "
            "that ignores them is not caught)",
            file=sys.stderr,
        )
    code: int = _run(_serve_stdio, proxy, loop=args.loop)
    if proxy.recorded:
        print(f"litmus-sandbox: MCP session recorded in {args.episodes}", file=sys.stderr)
    elif proxy.sent_anything:
        # A discovery probe (server/discover, then gone) is not a run: no episode, so
        # the gate never sees a zero-step run beside the real one.
        print(
            "litmus-sandbox: the client only probed the server (no tools/call, no "
            "completed initialize); no episode recorded",
            file=sys.stderr,
        )
    else:
        # No episode: a run that never happened must not pass for a run that did nothing.
        print("litmus-sandbox: the client sent nothing; no episode recorded", file=sys.stderr)
    return code


def _emulate_only(
    args: argparse.Namespace,
    command: list[str],
    policy: Policy | None,
    root: Path,
    probes: list[Probe],
) -> int:
    """``--tools-list``: serve the listed tools over stdio, emulated, with no server."""
    from ._emulate_server import EmulateServer

    if command or args.listen or args.upstream or args.replay:
        raise ConfigError(
            "--tools-list emulates a server that is not started: give no server command, "
            "--listen/--upstream or --replay"
        )
    if args.env:
        raise ConfigError("--env applies to a server the proxy starts; --tools-list starts none")
    if policy is None:
        raise ConfigError("--tools-list needs --policy: its [emulator] and its emulated tools")
    server = EmulateServer(
        args.tools_list,
        episodes=args.episodes,
        policy=policy,
        root=root,
        case_id=args.case_id,
        agent=args.agent,
        probes=probes,
        fsync=args.fsync,
        cache=args.cache,
    )
    served: int = _run(_serve_stdio, server, loop=args.loop)
    print(
        f"litmus-sandbox: server-less emulation of {args.tools_list} recorded in {args.episodes}",
        file=sys.stderr,
    )
    return served
