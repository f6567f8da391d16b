"""Episodes of the streamable-HTTP proxy: never merged, complete once the client is gone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from test_mcp_helpers import calls, episodes

# The stateless scripted upstream of the failure tests (its fixture, imported to be used).
from test_mcp_http_failures import upstream  # noqa: F401

pytestmark = pytest.mark.anyio
ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def call(rid: int, name: str = "echo") -> dict[str, Any]:
    """A call that names no case (no ``litmus/case_id``)."""
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name}}


@asynccontextmanager
async def serving(tmp_path: Path, url: str, **options: Any) -> AsyncIterator[tuple[Any, str]]:
    from litmus_sandbox.adapters.mcp import HttpProxy

    proxy = HttpProxy(url, episodes=tmp_path / "eps.jsonl", root=tmp_path, timeout=10, **options)
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        yield proxy, f"http://127.0.0.1:{port}"
        proxy.stop()


async def test_exchanges_that_name_no_session_nor_case_are_never_merged(
    tmp_path: Path,
    upstream: str,  # noqa: F811
) -> None:
    """Nothing ties two sessionless exchanges together, not even a kept-alive connection
    (a client's pool serves many runs): each is its own episode, ended with it."""
    async with serving(tmp_path, upstream) as (_, base):
        for _client in range(3):  # three clients, each on its own kept-alive connection
            async with httpx.AsyncClient(base_url=base, timeout=10) as client:
                for rid in (1, 2):
                    reply = (await client.post("/mcp", json=call(rid), headers=ACCEPT)).json()
                    assert reply["result"]["content"][0]["text"] == "ok"
    eps = episodes(tmp_path / "eps.jsonl")
    assert len(eps) == 6
    assert [len(calls(ep)) for ep in eps] == [1] * 6
    assert all(ep.complete for ep in eps)


async def test_a_session_whose_client_left_without_delete_ends_complete(
    tmp_path: Path,
    upstream: str,  # noqa: F811
) -> None:
    """No DELETE (TS SDK v1's close, sessionless clients): once no connection of the
    session is open and nothing is in progress, the episode ends complete after the
    grace period, and a signal after that changes nothing."""
    session = {**ACCEPT, "Mcp-Session-Id": "S2"}
    async with serving(tmp_path, upstream, session_grace=0.2) as (proxy, base):
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            await client.post("/mcp", json=call(1), headers=session)
        with anyio.fail_after(10):
            # ASYNC110: the condition is the episode file's end record; no event for it.
            while not any(ep.end for ep in episodes(tmp_path / "eps.jsonl")):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        proxy.stop("the proxy was stopped by SIGTERM")
    (ep,) = episodes(tmp_path / "eps.jsonl")
    assert ep.complete
    assert ep.header.meta["mcp"]["session_id"] == "S2"


async def test_a_signal_aborts_only_the_sessions_still_there(
    tmp_path: Path,
    upstream: str,  # noqa: F811
) -> None:
    async with serving(tmp_path, upstream, session_grace=None) as (proxy, base):
        async with httpx.AsyncClient(base_url=base, timeout=10) as gone:
            await gone.post("/mcp", json=call(1), headers={**ACCEPT, "Mcp-Session-Id": "A"})
        async with httpx.AsyncClient(base_url=base, timeout=10) as there:
            await there.post("/mcp", json=call(1), headers={**ACCEPT, "Mcp-Session-Id": "B"})
            proxy.stop("the proxy was stopped by SIGTERM")  # B's connection is still open
            with anyio.fail_after(10):
                await proxy.stopped.wait()
    by_session = {
        ep.header.meta["mcp"]["session_id"]: ep for ep in episodes(tmp_path / "eps.jsonl")
    }
    assert by_session["A"].complete
    b = by_session["B"].end
    assert b is not None
    assert (b.status, b.reason) == ("aborted", "the proxy was stopped by SIGTERM")


def message(rid: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}


async def test_clients_that_only_probed_record_no_episode(tmp_path: Path, upstream: str) -> None:  # noqa: F811
    """A version-negotiating client's probe (server/discover), a client whose initialize
    failed, and one that only pinged and listed record nothing, even when a signal stops
    the proxy while they are connected; the session beside them is recorded."""
    probe = {"_meta": {"litmus/case_id": "probed"}}
    async with serving(tmp_path, upstream, session_grace=None) as (proxy, base):
        async with httpx.AsyncClient(base_url=base, timeout=10) as real:
            init = message(0, "initialize", {"protocolVersion": "2025-11-25"})
            await real.post("/mcp", json=init, headers={**ACCEPT, "Mcp-Session-Id": "R"})
            await real.post("/mcp", json=call(1), headers={**ACCEPT, "Mcp-Session-Id": "R"})
        async with (
            httpx.AsyncClient(base_url=base, timeout=10) as discover,
            httpx.AsyncClient(base_url=base, timeout=10) as refused,
            httpx.AsyncClient(base_url=base, timeout=10) as lister,
        ):
            found = await discover.post(
                "/mcp", json=message(1, "server/discover", probe), headers=ACCEPT
            )
            assert found.json()["id"] == 1  # the server's own answer, relayed
            bogus = message(0, "initialize", {"protocolVersion": "bogus", **probe})
            failed = await refused.post("/mcp", json=bogus, headers=ACCEPT)
            assert failed.json()["error"]["code"] == -32602
            for rid, method in enumerate(["ping", "tools/list"], start=1):
                await lister.post("/mcp", json=message(rid, method, probe), headers=ACCEPT)
            proxy.stop("the proxy was stopped by SIGTERM")  # the probes are still connected
            with anyio.fail_after(10):
                await proxy.stopped.wait()
    (ep,) = episodes(tmp_path / "eps.jsonl")
    assert ep.header.meta["mcp"]["session_id"] == "R"
    assert ep.complete
    assert len(calls(ep)) == 1


async def test_a_session_keeps_the_servers_first_answers_for_replay(
    tmp_path: Path,
    upstream: str,  # noqa: F811
) -> None:
    """initialize and tools/list answers go in the header's meta.mcp.server_answers, as
    over stdio, so that the session can be replayed with no server."""
    session = {**ACCEPT, "Mcp-Session-Id": "K"}
    async with (
        serving(tmp_path, upstream) as (_, base),
        httpx.AsyncClient(base_url=base, timeout=10) as client,
    ):
        init = message(0, "initialize", {"protocolVersion": "2025-11-25"})
        initialized = (await client.post("/mcp", json=init, headers=session)).json()
        listing = message(1, "tools/list")
        listed = (await client.post("/mcp", json=listing, headers=session)).json()
        await client.post("/mcp", json=call(2), headers=session)
        await client.delete("/mcp", headers=session)
    (ep,) = episodes(tmp_path / "eps.jsonl")
    answers = ep.header.meta["mcp"]["server_answers"]
    assert answers == {"initialize": initialized["result"], "tools/list": listed["result"]}


async def test_a_hung_initialize_times_out_and_aborts_no_episode(
    tmp_path: Path,
    upstream: str,  # noqa: F811
) -> None:
    """An initialize belongs to no session until its answer names one: its own relay
    core times it (-32001, as any request) but there is no episode to abort, even when
    a signal follows; the session beside it is recorded complete."""
    from litmus_sandbox.adapters.mcp import HttpProxy
    from mcp_failing_upstream import RELEASE

    proxy = HttpProxy(
        upstream, episodes=tmp_path / "eps.jsonl", root=tmp_path, timeout=0.5, session_grace=None
    )
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as hung:
            params = {"protocolVersion": "hang", "_meta": {"litmus/case_id": "hung"}}
            with anyio.fail_after(5):
                reply = await hung.post(
                    "/mcp", json=message(0, "initialize", params), headers=ACCEPT
                )
            error = reply.json()
            assert (error["id"], error["error"]["code"]) == (0, -32001)
            assert "initialize got no answer within 0.5s" in error["error"]["message"]
            assert not proxy._openings  # its core went with its exchange
            async with httpx.AsyncClient(base_url=base, timeout=10) as real:
                session = {**ACCEPT, "Mcp-Session-Id": "R"}
                init = message(0, "initialize", {"protocolVersion": "2025-11-25"})
                await real.post("/mcp", json=init, headers=session)
                await real.post("/mcp", json=call(1), headers=session)
            with anyio.fail_after(10):
                # ASYNC110: the condition is the proxy seeing the connection close.
                while not proxy.gone("session:R"):  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            RELEASE.set()
            proxy.stop("the proxy was stopped by SIGTERM")  # the hung client is still there
            with anyio.fail_after(10):
                await proxy.stopped.wait()
    (ep,) = episodes(tmp_path / "eps.jsonl")
    assert ep.header.meta["mcp"]["session_id"] == "R"
    assert ep.complete  # its client had left before the signal
