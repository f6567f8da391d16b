"""A chat-completions endpoint on loopback, for the HTTP judge's tests and benchmark.

A real HTTP/1.1 server (``http.server``, one thread per connection, keep-alive) bound to
127.0.0.1 on a free port. Each request is recorded (time, path, headers, JSON body) and
answered by ``answer(request)``: a :class:`Reply` with a status, headers, a body (a
mapping is sent as JSON) and a delay before answering. The default answer reads the step
being judged: unsafe when it mentions ``evil``, else safe.

Run as a program (``python judge_endpoint.py --delay 0.05``) it serves the default answer
and prints its base URL on the first line (the benchmark starts it that way); ``GET
/stats`` then says how many requests it answered.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "judge-model-2026-01"
SYSTEM_FINGERPRINT = "fp_test_1"


@dataclass(frozen=True)
class Request:
    at: float
    path: str
    headers: dict[str, str]
    raw: bytes
    #: The client's port (its end of the loopback connection).
    peer_port: int = 0

    @property
    def body(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.raw)
        return data

    @property
    def prompt(self) -> str:
        return str(self.body["messages"][1]["content"])

    @property
    def step_text(self) -> str:
        """The part of the default prompt that shows the step judged."""
        return self.prompt.rpartition("The step to judge")[2] or self.prompt


@dataclass
class Reply:
    status: int = 200
    body: bytes | Mapping[str, Any] = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def completion(
    content: str | None,
    *,
    model: str = MODEL,
    fingerprint: str | None = SYSTEM_FINGERPRINT,
    refusal: str | None = None,
    finish_reason: str = "stop",
) -> dict[str, Any]:
    """An OpenAI chat-completion body whose one choice says ``content``."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if refusal is not None:
        message["refusal"] = refusal
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "system_fingerprint": fingerprint,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }


def verdict(safe: bool, reason: str = "judged", **kw: Any) -> Reply:
    return Reply(body=completion(json.dumps({"safe": safe, "reason": reason}), **kw))


def default_answer(request: Request) -> Reply:
    unsafe = "evil" in request.step_text
    return verdict(not unsafe, "mentions evil" if unsafe else "harmless")


class Endpoint:
    """The server (see the module docstring). Use as a context manager."""

    def __init__(
        self, answer: Callable[[Request], Reply] = default_answer, *, delay: float = 0.0
    ) -> None:
        self.answer = answer
        self.delay = delay
        self.requests: list[Request] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> Endpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length)
        peer_port = handler.client_address[1]
        request = Request(
            time.monotonic(), handler.path, dict(handler.headers.items()), raw, peer_port
        )
        with self._lock:
            self.requests.append(request)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            reply = self.answer(request)
            if self.delay or reply.delay:
                time.sleep(self.delay + reply.delay)
        finally:
            with self._lock:
                self.in_flight -= 1
        body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        try:
            handler.send_response(reply.status)
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test): nothing to answer


class _Server(ThreadingHTTPServer):
    # The default backlog (5) drops the SYNs of a client opening 32 connections at once;
    # each dropped one costs a second of retransmission.
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a killed scorer) is no error of the endpoint's."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def _handler(endpoint: Endpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints
        # Headers and body go out as two writes: with Nagle's algorithm the second waits
        # for the client's delayed ACK (40 ms a request). Real servers set TCP_NODELAY.
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            endpoint._serve(self)

        def do_GET(self) -> None:
            """``GET /stats``: how many requests were answered (for the benchmark)."""
            body = json.dumps({"requests": len(endpoint.requests)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet

    return Handler


@contextmanager
def running(answer: Callable[[Request], Reply] = default_answer, **kw: Any) -> Iterator[Endpoint]:
    with Endpoint(answer, **kw) as endpoint:
        yield endpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    args = parser.parse_args()
    with Endpoint(delay=args.delay) as endpoint:
        print(endpoint.url, flush=True)
        with suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
