"""The floor for ``mcp_bench.py --transport http``: a reverse proxy that records.

    python bench/http_recording_relay.py RECORD UPSTREAM_URL

Serves HTTP/1.1 on a free loopback port (h11 over anyio sockets, the proxy's own
libraries; it prints ``port N`` when ready), forwards each request to the upstream with
one pooled httpx client, headers and body as they came, and streams each response back.
A POST holding a ``tools/call`` has its answer read whole (the server ends a call's stream
once it has answered), one record appended (written, not fsynced), then sent. Nothing
else: no policy, no timeouts, no episodes, no tasks. What it adds to a call is the floor
for a recording HTTP relay in Python.
"""

from __future__ import annotations

import sys
import time
from typing import BinaryIO

import anyio
import h11
import httpx
import msgspec
from anyio.abc import SocketStream

_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"host", b"content-length"}


async def main(out: BinaryIO, upstream: str) -> None:
    decode = msgspec.json.Decoder()
    encode = msgspec.json.Encoder()
    client = httpx.AsyncClient(timeout=None)

    async def serve(stream: SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        async with stream:
            while True:
                request, body = None, bytearray()
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        try:
                            conn.receive_data(await stream.receive(1 << 16))
                        except (anyio.EndOfStream, anyio.BrokenResourceError):
                            return
                    elif isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.Data):
                        body += event.data
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    else:
                        return
                assert request is not None
                headers = [(n, v) for n, v in request.headers.raw_items() if n.lower() not in _HOP]
                tool = None
                if request.method == b"POST":
                    msg = decode.decode(body)
                    if isinstance(msg, dict) and msg.get("method") == "tools/call":
                        tool, started = msg["params"]["name"], time.time()
                upstream_req = client.build_request(
                    request.method.decode(), upstream, headers=headers, content=bytes(body)
                )
                response = await client.send(upstream_req, stream=True)
                try:
                    out_headers = [(n, v) for n, v in response.headers.raw if n.lower() not in _HOP]
                    if tool is not None:
                        whole = await response.aread()
                        record = {"kind": "step", "tool": tool, "at": started, "bytes": len(whole)}
                        out.write(encode.encode(record) + b"\n")
                        out.flush()
                        out_headers.append((b"content-length", str(len(whole)).encode()))
                        data = conn.send(
                            h11.Response(status_code=response.status_code, headers=out_headers)
                        )
                        await stream.send(
                            data + conn.send(h11.Data(data=whole)) + conn.send(h11.EndOfMessage())
                        )
                    else:
                        await stream.send(
                            conn.send(
                                h11.Response(status_code=response.status_code, headers=out_headers)
                            )
                        )
                        async for chunk in response.aiter_raw():
                            await stream.send(conn.send(h11.Data(data=chunk)))
                        await stream.send(conn.send(h11.EndOfMessage()))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return
                finally:
                    await response.aclose()
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    print(f"port {listener.extra(anyio.abc.SocketAttribute.local_port)}", flush=True)
    async with client, listener:
        await listener.serve(serve)


if __name__ == "__main__":
    with open(sys.argv[1], "ab") as records:
        anyio.run(main, records, sys.argv[2])
