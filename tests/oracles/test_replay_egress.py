"""HTTP egress replay: the transports record response bodies and serve them back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from litmus_sandbox import (
    ConfigError,
    RecordDecodeError,
    RecordingWarning,
    Sandbox,
    ToolCallStep,
    read_episodes,
)
from litmus_sandbox.oracles.egress import (
    EgressFlow,
    EgressPolicy,
    EgressProbe,
    EgressTransport,
    HttpCassette,
    HttpRecorder,
    SyncEgressTransport,
)

pytestmark = pytest.mark.anyio

URL = "https://api.example/items?page=2"


class Chunks(httpx.AsyncByteStream, httpx.SyncByteStream):
    """A streamed body (not in memory), like a real connection's."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for c in self.chunks:
            yield c

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks


class Upstream(httpx.AsyncBaseTransport, httpx.BaseTransport):
    """Counts the requests that really went out; answers with a streamed gzip-free body."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def _answer(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(f"{request.method} {request.url}")
        return httpx.Response(
            200,
            headers={"content-type": "application/json", "x-server": "real"},
            stream=Chunks(b'{"items": ', b"[1, 2]}"),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return self._answer(request)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._answer(request)


async def test_recorded_responses_are_served_back_without_a_connection(tmp_path: Path) -> None:
    cassette = tmp_path / "http.jsonl"
    upstream = Upstream()
    recorder = HttpRecorder(cassette)
    recording = EgressTransport(transport=upstream, record=recorder)
    async with httpx.AsyncClient(transport=recording) as client:
        original = await client.get(URL)
        await client.post("https://api.example/echo", content=b"\xff\x00")
    recorder.close()
    lines = [json.loads(x) for x in cassette.read_text().splitlines()]
    assert [(x["kind"], x["method"], x["url"], x["truncated"]) for x in lines] == [
        ("http", "GET", URL, False),
        ("http", "POST", "https://api.example/echo", False),
    ]
    assert lines[0]["body"] == '{"items": [1, 2]}'

    seen: list[EgressFlow] = []
    replaying = EgressTransport(
        sink=seen.append, transport=upstream, replay=HttpCassette.from_files([cassette])
    )
    async with httpx.AsyncClient(transport=replaying) as client:
        served = await client.get(URL)
        missed = await client.get(URL)  # recorded once: served once
        posted = await client.post("https://api.example/echo", content=b"other body")
    assert len(upstream.seen) == 2  # nothing more went out
    assert served.json() == original.json() == {"items": [1, 2]}
    assert served.headers["x-server"] == "real"
    assert missed.status_code == 502
    assert missed.headers["x-litmus-sandbox"] == "replay-miss"
    assert posted.status_code == 200  # matched by method and URL, not by body
    decisions = [(f.decision, f.status) for f in dict.fromkeys(seen)]  # sinks see flows twice
    assert decisions == [("replayed", 200), ("replay_miss", 502), ("replayed", 200)]


async def test_forwarded_misses_are_recorded_and_partial_bodies_never_served(
    tmp_path: Path,
) -> None:
    cassette = tmp_path / "http.jsonl"
    upstream = Upstream()
    recorder = HttpRecorder(cassette)
    grow = EgressTransport(
        transport=upstream, replay=HttpCassette(), on_miss="forward", record=recorder
    )
    async with httpx.AsyncClient(transport=grow) as client:
        assert (await client.get(URL)).json() == {"items": [1, 2]}
        async with client.stream("GET", "https://api.example/big"):
            pass  # the tool hung up without reading the body
    recorder.close()
    again = HttpCassette.from_files([cassette])
    assert again.take("GET", URL) is not None
    assert again.take("GET", "https://api.example/big") is None  # truncated: not served
    with pytest.raises(ConfigError, match="on_miss"):
        EgressTransport(on_miss="maybe")


def test_sync_transport_records_and_replays_too(tmp_path: Path) -> None:
    cassette = tmp_path / "http.jsonl"
    upstream = Upstream()
    recorder = HttpRecorder(cassette)
    with httpx.Client(transport=SyncEgressTransport(transport=upstream, record=recorder)) as c:
        assert c.get(URL).json() == {"items": [1, 2]}
    recorder.close()
    replay = SyncEgressTransport(transport=upstream, replay=HttpCassette.from_files([cassette]))
    with httpx.Client(transport=replay) as c:
        assert c.get(URL).json() == {"items": [1, 2]}
    assert len(upstream.seen) == 1


def test_a_torn_egress_cassette_serves_its_whole_lines_with_a_warning(tmp_path: Path) -> None:
    cassette = tmp_path / "http.jsonl"
    upstream = Upstream()
    recorder = HttpRecorder(cassette)
    with httpx.Client(transport=SyncEgressTransport(transport=upstream, record=recorder)) as c:
        c.get(URL)
        c.get(URL)
    recorder.close()
    data = cassette.read_bytes()
    cassette.write_bytes(data[: len(data) - 30])  # the second record, cut mid-way
    with pytest.warns(RecordingWarning, match=r"http\.jsonl:2: warning: torn last line"):
        replay = HttpCassette.from_files([cassette])
    assert [str(w) for w in replay.warnings] == [
        f"{cassette}:2: warning: torn last line (the recorder stopped mid-record); "
        "kept every whole line"
    ]
    with httpx.Client(transport=SyncEgressTransport(transport=upstream, replay=replay)) as c:
        assert c.get(URL).json() == {"items": [1, 2]}
        assert c.get(URL).status_code == 502  # the torn one is not served
    assert len(upstream.seen) == 2


def test_an_egress_cassette_torn_before_its_end_is_an_error(
    tmp_path: Path,
) -> None:
    """Only a torn *last* line is tolerated (a warning); a torn record with records after
    it is a bad file, named by ``file:line``."""
    cassette = tmp_path / "http.jsonl"
    upstream = Upstream()
    for _ in range(2):  # the first recorder is killed mid-record; a second appends
        recorder = HttpRecorder(cassette)
        with httpx.Client(transport=SyncEgressTransport(transport=upstream, record=recorder)) as c:
            c.get(URL)
        recorder.close()
        if cassette.read_bytes().count(b"\n") == 1:
            cassette.write_bytes(cassette.read_bytes()[:-30])
    with pytest.raises(RecordDecodeError, match=r"http\.jsonl:1: torn record before the end"):
        HttpCassette.from_files([cassette])


def test_a_mapping_serves_fixed_responses_every_time(tmp_path: Path) -> None:
    cassette = HttpCassette.from_mapping(
        {
            f"GET {URL}": {"status": 201, "headers": {"x-a": "1"}, "body": "made"},
            "get https://api.example/plain": "just text",
        }
    )
    transport = SyncEgressTransport(transport=Upstream(), replay=cassette)
    with httpx.Client(transport=transport) as c:
        for _ in range(2):
            r = c.get(URL)
            assert (r.status_code, r.text, r.headers["x-a"]) == (201, "made", "1")
        assert c.get("https://api.example/plain").text == "just text"
    with pytest.raises(ConfigError, match="METHOD URL"):
        HttpCassette.from_mapping({"https://no-method": "x"})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "http", "method": "GET", "url": "u"}\n{"kind": "episode"}\n')
    with pytest.raises(RecordDecodeError, match=r"bad\.jsonl:2"):
        HttpCassette.from_files([bad])


async def test_the_sandbox_probe_serves_tools_from_an_egress_cassette(tmp_path: Path) -> None:
    cassette = HttpCassette.from_mapping({f"GET {URL}": '{"items": []}'})
    probe = EgressProbe(
        EgressPolicy(default="deny", rules={"api.example": "allow"}), replay=cassette
    )
    sandbox = Sandbox(root=tmp_path / "root", episodes=tmp_path / "eps.jsonl", egress=probe)

    async def fetch() -> str:
        async with sandbox.http_client(transport=Upstream()) as http:
            return (await http.get(URL)).text

    sandbox.tool(fetch)
    async with sandbox, sandbox.episode("c1") as ep:
        shown = await ep.call("fetch")
    assert shown.text == '{"items": []}'
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])
    (step,) = [s for s in episode.steps if isinstance(s, ToolCallStep)]
    (event,) = step.effects.egress
    assert (event.host, event.decision, event.status) == ("api.example", "replayed", 200)
    assert step.findings == ()  # served, not escaped
    assert episode.header.oracles["egress"]["replay"] == {"on_miss": "error"}
