"""Egress that cannot be talked around, and that changes nothing: a deny on an address holds
for every spelling of it (0 bytes reach a loopback canary, in process and in strict mode),
and an upstream that refuses looks the same to the client as without the proxy."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from litmus_sandbox import Sandbox, ToolCallStep, read_episodes
from litmus_sandbox.oracles.egress import EgressPolicy, normalize_host, strict_available

pytestmark = pytest.mark.anyio

#: Every spelling of 127.0.0.3 a client may use (the C resolver reads the IPv4 ones so).
SPELLINGS = [
    "127.0.0.3",
    "2130706435",
    "0x7f000003",
    "0X7F000003",
    "127.3",
    "0177.0.0.3",
    "127.0.0.03",
    "0x7f.0.0.3",
    "[::ffff:127.0.0.3]",
    "[::ffff:7f00:3]",
    "127.0.0.3.",
]


class Canary:
    """A TCP listener on 127.0.0.3 that counts every byte anyone sends it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.3", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self.connections = 0
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            with conn:
                conn.settimeout(0.5)
                try:
                    while data := conn.recv(65536):
                        self.received += len(data)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def canary() -> Iterator[Canary]:
    c = Canary()
    try:
        yield c
    finally:
        c.close()


def url(spelling: str, port: int) -> str:
    return f"http://{spelling}:{port}/secret"


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_is_the_one_address_rules_name(spelling: str) -> None:
    policy = EgressPolicy({"127.0.0.3": "deny"}, default="allow")
    assert normalize_host(spelling) == "127.0.0.3"
    assert policy.decide(spelling, 80).mode == "deny"
    # A rule may spell it any way too.
    assert EgressPolicy({spelling: "deny"}).decide("127.0.0.3").mode == "deny"


def test_names_are_matched_in_one_spelling() -> None:
    policy = EgressPolicy({"xn--bcher-kva.example": "deny", "*.internal": "deny"})
    assert policy.decide("BÜCHER.example.").mode == "deny"
    assert policy.decide("DB.Internal.").mode == "deny"
    assert normalize_host("[::1]") == "::1"
    assert normalize_host("[0:0:0:0:0:0:0:1]") == "::1"
    assert normalize_host("1.2.3.4.5") == "1.2.3.4.5"  # not an address: matched as written


@given(st.text(alphabet="0123456789abcdefxX.", min_size=1, max_size=16))
def test_ipv4_forms_are_read_as_the_c_resolver_reads_them(text: str) -> None:
    """(Trailing dots are dropped first, as for names: ``127.0.0.3.`` is 127.0.0.3.)"""
    bare = text.lower().rstrip(".")
    try:
        expected = socket.inet_ntoa(socket.inet_aton(bare))
    except OSError:
        expected = bare
    assert normalize_host(text) == expected


POLICY = {"default": "allow", "127.0.0.3": "deny"}


async def test_no_spelling_reaches_a_denied_address_in_process(
    tmp_path: Path, canary: Canary
) -> None:
    import httpx

    sb = Sandbox(root=tmp_path / "root", episodes=tmp_path / "eps.jsonl", probes=(), egress=POLICY)
    statuses: list[int | str] = []

    async def fetch(spelling: str) -> int | str:
        async with sb.http_client() as client:
            try:
                r = await client.get(url(spelling, canary.port))
            except httpx.InvalidURL:  # httpx itself refuses 0177.0.0.3 and 127.0.0.03
                statuses.append("refused by httpx")
                return "refused by httpx"
            statuses.append(r.status_code)
            return r.status_code

    sb.tool(fetch)
    async with sb, sb.episode("spellings") as ep:
        for spelling in SPELLINGS:
            await ep.call("fetch", spelling=spelling)
    await anyio.sleep(0.2)
    assert (canary.connections, canary.received) == (0, 0)
    assert set(statuses) <= {403, "refused by httpx"}
    assert statuses.count(403) >= len(SPELLINGS) - 2
    (episode,) = read_episodes(tmp_path / "eps.jsonl")
    steps = [s for s in episode.steps if isinstance(s, ToolCallStep)]
    sent = [s for s in steps if s.effects.egress]
    assert len(sent) == statuses.count(403)
    assert all([e.decision for e in s.effects.egress] == ["deny"] for s in sent)
    assert all("escape" in [f.code for f in s.findings] for s in sent)


@pytest.mark.skipif(not strict_available()[0], reason=f"strict mode: {strict_available()[1]}")
async def test_no_spelling_reaches_a_denied_address_in_strict_mode(
    tmp_path: Path, canary: Canary
) -> None:
    sb = Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "eps.jsonl",
        probes=(),
        egress=POLICY,
        strict_egress=True,
    )
    async with sb, sb.episode("spellings") as ep:
        for spelling in SPELLINGS:
            await ep.run(["curl", "-sS", "-g", "--max-time", "5", url(spelling, canary.port)])
        # Around the proxy: straight to the address, with no proxy at all.
        await ep.run(
            ["curl", "-sS", "--noproxy", "*", "--max-time", "3", url("127.3", canary.port)]
        )
    await anyio.sleep(0.2)
    assert (canary.connections, canary.received) == (0, 0)
    (episode,) = read_episodes(tmp_path / "eps.jsonl")
    steps = [s for s in episode.steps if isinstance(s, ToolCallStep)]
    for step in steps[:-1]:
        assert [e.decision for e in step.effects.egress] == ["deny"], step.args
    assert [e.decision for e in steps[-1].effects.egress] == ["blocked"]
    assert all("escape" in [f.code for f in s.findings] for s in steps)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("strict", [False, True])
async def test_a_refused_upstream_looks_the_same_to_a_subprocess_tool(
    tmp_path: Path, strict: bool
) -> None:
    """Not an HTTP 502: the connection is reset, in strict mode too (the proxy accepts
    on the bridge's own listener inside the namespace), and the egress event says why."""
    if strict and not strict_available()[0]:
        pytest.skip(f"strict mode: {strict_available()[1]}")
    port = free_port()
    sb = Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "eps.jsonl",
        probes=(),
        egress={"default": "allow"},
        strict_egress=strict,
    )
    async with sb, sb.episode("refused") as ep:
        result = await ep.run(["curl", "-sS", "-i", "--max-time", "5", f"http://127.0.0.1:{port}/"])
    (episode,) = read_episodes(tmp_path / "eps.jsonl")
    (step,) = [s for s in episode.steps if isinstance(s, ToolCallStep)]
    assert step.shown.structured["exit_code"] == 56, result.text  # not 52, an empty reply
    assert "connection reset by peer" in result.text.lower()
    assert "502" not in result.text
    (event,) = step.effects.egress
    assert (event.status, event.error) == (None, "Connection refused")


async def test_a_refused_upstream_raises_in_process_as_without_the_sandbox(
    tmp_path: Path,
) -> None:
    import httpx

    port = free_port()
    sb = Sandbox(root=tmp_path / "root", episodes=tmp_path / "eps.jsonl", probes=())
    async with sb, sb.episode("refused"), sb.http_client() as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/")
    (episode,) = read_episodes(tmp_path / "eps.jsonl")
    assert episode.end is not None
    (event,) = episode.end.unattributed.egress
    assert isinstance(event.error, str)
    assert event.error.startswith("ConnectError")
