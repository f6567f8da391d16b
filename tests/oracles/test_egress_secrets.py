"""Recorded egress keeps no secret: no URL user information, no token-like query value, no
credential header's value, in episode streams and in egress cassettes alike."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from litmus_sandbox import Sandbox, ToolCallStep, read_episodes
from litmus_sandbox.oracles.egress import EgressPolicy, EgressProbe, HttpCassette, HttpRecorder

pytestmark = pytest.mark.anyio

CANARY = "canary7f3e2d1c0b9a"


@pytest.fixture
def server() -> Iterator[str]:
    """Answers every GET with a session cookie holding the canary."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Set-Cookie", f"session={CANARY}; HttpOnly")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            return None

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def no_canary(folder: Path) -> None:
    for f in folder.rglob("*"):
        if f.is_file():
            assert CANARY.encode() not in f.read_bytes(), f


async def test_in_process_and_subprocess_egress_keep_no_secret(tmp_path: Path, server: str) -> None:
    cassette = tmp_path / "egress.jsonl"
    probe = EgressProbe(EgressPolicy(), record=HttpRecorder(cassette))
    sb = Sandbox(root=tmp_path / "root", episodes=tmp_path / "eps.jsonl", probes=(), egress=probe)
    url = f"http://me:{CANARY}@{server}/data?q=1&api_key={CANARY}&accessToken={CANARY}"

    async def fetch() -> str:
        async with sb.http_client() as client:
            return (await client.get(url)).text

    sb.tool(fetch)
    async with sb, sb.episode("secrets") as ep:
        assert (await ep.call("fetch")).text == "ok"
        # The secret from the tool's environment (a call's arguments are recorded whole).
        script = f'curl -sS "http://{server}/x?token=$TOKEN&page=2"'
        await ep.run(["sh", "-c", script], env={**os.environ, "TOKEN": CANARY})
    assert probe.record is not None
    probe.record.close()
    (episode,) = read_episodes(tmp_path / "eps.jsonl")
    first, second = (s for s in episode.steps if isinstance(s, ToolCallStep))
    (inside,) = first.effects.egress
    (outside,) = second.effects.egress
    assert inside.path == "/data?q=1&api_key=<redacted>&accessToken=<redacted>"
    assert outside.path == "/x?token=<redacted>&page=2"
    recorded = cassette.read_text()
    assert "<redacted>" in recorded  # the URL's tokens and the cookie's value
    no_canary(tmp_path)
    # What was recorded still serves the same request (matched as recorded).
    replay = HttpCassette.from_files([cassette])
    assert replay.take("GET", url.replace(f"me:{CANARY}@", "")) is not None


def test_the_query_parameters_redacted_are_configurable() -> None:
    policy = EgressPolicy.from_mapping({"default": "allow", "redact_query_params": ["sig"]})
    assert policy.redact_target("/x?sig=1&token=2") == "/x?sig=<redacted>&token=2"
    assert policy.describe()["redact_query_params"] == ["sig"]
    assert EgressPolicy().redact_target("/x?token=2") == "/x?token=<redacted>"
