"""The proxy's file-descriptor streams: every byte in order, EOF, back-pressure, close."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anyio.abc import ByteReceiveStream
from hypothesis import given, settings
from hypothesis import strategies as st
from litmus_sandbox.adapters.mcp._fdstream import (
    FdReceiveStream,
    FdSendStream,
    LineTooLong,
    feed_lines,
    iter_lines,
)
from litmus_sandbox.adapters.mcp._lines import LineSplitter

pytestmark = pytest.mark.anyio


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):  # an owned stream closed it
            os.close(fd)


async def test_bytes_arrive_in_order_past_the_unread_limit(pipe: tuple[int, int]) -> None:
    """A reader that falls behind stops reading (the writer waits), then catches up."""
    r, w = pipe
    data = os.urandom(3 << 20)  # three times the reader's limit of unread bytes
    source, sink = FdReceiveStream(r), FdSendStream(w)
    got = bytearray()
    written = anyio.Event()

    async def write_all() -> None:
        await sink.send(data)
        written.set()
        os.close(w)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(write_all)
            got += await source.receive(100_000)  # reading has begun
            await anyio.sleep(0.2)  # let the pipe and the reader's buffer fill
            assert not written.is_set()  # nothing reads ahead without bound: the writer waits
            while True:
                try:
                    got += await source.receive(100_000)
                except anyio.EndOfStream:
                    break
    await source.aclose()
    assert bytes(got) == data


async def test_closing_wakes_a_waiting_receiver_and_forgets_the_descriptor(
    pipe: tuple[int, int],
) -> None:
    r, _w = pipe
    source = FdReceiveStream(r)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:

            async def close_soon() -> None:
                await anyio.sleep(0.05)
                await source.aclose()

            tg.start_soon(close_soon)
            with pytest.raises(anyio.ClosedResourceError):
                await source.receive()
    with pytest.raises(anyio.ClosedResourceError):
        await source.receive()
    # The descriptor can be closed and its number reused by a new stream on this loop.
    os.close(r)
    r2, w2 = os.pipe()
    try:
        again = FdReceiveStream(r2)
        os.write(w2, b"fresh")
        with anyio.fail_after(5):
            assert await again.receive() == b"fresh"
        await again.aclose()
    finally:
        os.close(r2)
        os.close(w2)


async def test_an_owned_stream_closes_its_descriptor(pipe: tuple[int, int]) -> None:
    r, w = pipe
    sink = FdSendStream(w, owned=True)
    await sink.send(b"last\n")
    await sink.aclose()
    source = FdReceiveStream(r, owned=True)
    lines = [line async for line in iter_lines(source)]  # EOF: the writer end is closed
    assert lines == [b"last\n"]
    await source.aclose()
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(r)


@settings(max_examples=30, deadline=None)
@given(
    chunks=st.lists(st.binary(max_size=300).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    cuts=st.lists(st.integers(min_value=1, max_value=97), min_size=1, max_size=5),
)
def test_lines_come_back_exactly_however_the_bytes_are_cut(
    chunks: list[bytes], cuts: list[int]
) -> None:
    data = b"\n".join(chunks)  # the last line may lack its newline
    *whole, last = chunks or [b""]
    expected = [line + b"\n" for line in whole] + ([last] if last else [])

    async def run() -> list[bytes]:
        r, w = os.pipe()
        source = FdReceiveStream(r, owned=True)
        sink = FdSendStream(w, owned=True)

        async def write_in_pieces() -> None:
            i, k = 0, 0
            while i < len(data):
                n = cuts[k % len(cuts)]
                await sink.send(data[i : i + n])
                await anyio.lowlevel.checkpoint()
                i, k = i + n, k + 1
            await sink.aclose()

        async with anyio.create_task_group() as tg:
            tg.start_soon(write_in_pieces)
            got = [line async for line in iter_lines(source)]
        await source.aclose()
        return got

    for backend in ("asyncio", "trio"):
        assert anyio.run(run, backend=backend) == expected


async def test_a_send_cut_short_is_finished_before_the_next_one(pipe: tuple[int, int]) -> None:
    """A timeout while the pipe is full never leaves half a message for the next to follow."""
    r, w = pipe
    sink = FdSendStream(w)
    first, second = b"a" * 200_000 + b"\n", b"b" * 10 + b"\n"
    with anyio.move_on_after(0.2):
        await sink.send(first)  # nobody reads: the pipe fills, and the send is cancelled
    source = FdReceiveStream(r)
    got = bytearray()

    async def read_all() -> None:
        nonlocal got
        while len(got) < len(first) + len(second):
            got += await source.receive()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_all)
            await sink.send(second)
    await source.aclose()
    await sink.aclose()
    assert bytes(got) == first + second


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_one_receiver_at_a_time(pipe: tuple[int, int], anyio_backend: str) -> None:
    r, w = pipe
    source = FdReceiveStream(r)
    async with anyio.create_task_group() as tg:
        tg.start_soon(source.receive)
        await anyio.sleep(0.05)
        with pytest.raises(anyio.BusyResourceError):
            await source.receive()
        os.write(w, b"x")
    await source.aclose()


def test_what_was_read_ahead_survives_a_change_of_event_loop(pipe: tuple[int, int]) -> None:
    r, w = pipe
    source = FdReceiveStream(r)
    os.write(w, b"abc\ndef\n")

    async def first() -> bytes:
        data: bytes = await source.receive(4)
        return data

    async def rest() -> bytes:
        out = b""
        while len(out) < 4:
            out += await source.receive()
        return out

    assert anyio.run(first) == b"abc\n"
    assert anyio.run(rest, backend="trio") == b"def\n"
    os.write(w, b"ghi\n")
    assert anyio.run(rest) == b"ghi\n"
    anyio.run(source.aclose)


async def test_send_nowait_queues_what_the_pipe_cannot_take(pipe: tuple[int, int]) -> None:
    r, w = pipe
    sink = FdSendStream(w)
    assert sink.send_nowait(b"small\n")  # the pipe takes it: nothing waits
    big, after = b"x" * 200_000 + b"\n", b"after\n"
    assert not sink.send_nowait(big)  # more than the pipe holds: the rest is queued
    assert not sink.send_nowait(after)  # behind it, never before
    source = FdReceiveStream(r)
    got = bytearray()
    want = b"small\n" + big + after

    async def read_all() -> None:
        nonlocal got
        while len(got) < len(want):
            got += await source.receive()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_all)
            await sink.flush()
    await source.aclose()
    assert bytes(got) == want


def test_read_ahead_carried_over_twice_keeps_its_order(pipe: tuple[int, int]) -> None:
    r, w = pipe
    source = FdReceiveStream(r)
    os.write(w, b"a" * 1000)

    async def some(n: int) -> bytes:
        data: bytes = await source.receive(n)
        return data

    got = anyio.run(some, 10)  # reads all 1000 ahead, hands out 10
    os.write(w, b"b" * 100)
    got += anyio.run(some, 10)  # another loop: 990 carried over, then 100 more read ahead
    os.write(w, b"c" * 10)
    os.close(w)

    async def rest() -> bytes:
        out = b""
        while True:
            try:
                out += await source.receive()
            except anyio.EndOfStream:
                return out

    got += anyio.run(rest)
    anyio.run(source.aclose)
    assert got == b"a" * 1000 + b"b" * 100 + b"c" * 10


class _Chunks(ByteReceiveStream):
    """A stream that gives its chunks, then ends."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._chunks:
            raise anyio.EndOfStream
        return self._chunks.pop(0)

    async def aclose(self) -> None:
        pass


async def test_a_line_over_the_bound_is_reported_at_once_and_dropped() -> None:
    """Memory stays bounded: the long line is reported as soon as it is too long, its
    rest dropped up to its newline, and the lines after it come whole."""
    chunks = [
        b"ok\n" + b"x" * 40,
        b"x" * 40,
        b"x" * 40 + b"\nnext\n",
        b"short\nlong" + b"y" * 99 + b"\n",
    ]
    got = [line async for line in iter_lines(_Chunks(chunks), 64)]
    assert [g if isinstance(g, bytes) else ("too long", g.size) for g in got] == [
        b"ok\n",
        ("too long", 80),
        b"next\n",
        b"short\n",
        ("too long", 104),
    ]
    # What was read of each is kept (the id scan looks there), up to its newline.
    assert [g.head for g in got if not isinstance(g, bytes)] == [
        b"x" * 80,
        b"long" + b"y" * 99 + b"\n",
    ]


def test_the_splitter_gives_what_iter_lines_gives_however_it_is_fed() -> None:
    """One whole line per chunk (the no-copy case), lines cut anywhere, a long line."""
    splitter = LineSplitter(8)
    got: list[bytes | tuple[str, int]] = []
    for chunk in [b"one\n", b"tw", b"o\nthr", b"ee\n", b"123456789\n", b"x" * 9, b"y\nz\n"]:
        got += [g if isinstance(g, bytes) else ("too long", g.size) for g in splitter.feed(chunk)]
    assert got == [
        b"one\n",
        b"two\n",
        b"three\n",
        ("too long", 10),
        ("too long", 9),
        b"z\n",
    ]
    splitter.feed(b"tail")
    assert splitter.rest() == b"tail"
    assert splitter.rest() == b""


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_feed_lines_awaits_a_handler_that_must_wait_and_keeps_the_order(
    pipe: tuple[int, int], anyio_backend: str
) -> None:
    """Lines that arrive while a handler waits are handed on after it, in order; the
    last line without its newline comes too."""
    r, w = pipe
    source = FdReceiveStream(r)
    got: list[bytes] = []
    waited = anyio.Event()

    async def slow(line: bytes) -> None:
        await waited.wait()
        got.append(b"after " + line)

    def on_line(line: bytes | LineTooLong) -> Any:
        assert isinstance(line, bytes)
        if line == b"wait\n":
            return slow(line)
        got.append(line)
        return None

    async def write() -> None:
        os.write(w, b"a\nwait\n")
        await anyio.sleep(0.05)
        os.write(w, b"b\nc\n")  # read while the handler waits
        await anyio.sleep(0.05)
        assert got == [b"a\n"]
        waited.set()
        await anyio.sleep(0.05)
        os.write(w, b"d\ne")
        os.close(w)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            await feed_lines(source, 1024, on_line)
    await source.aclose()
    assert got == [b"a\n", b"after wait\n", b"b\n", b"c\n", b"d\n", b"e"]


async def test_feed_lines_stops_when_told_and_raises_what_the_handler_raised(
    pipe: tuple[int, int],
) -> None:
    r, w = pipe
    source = FdReceiveStream(r)
    got: list[bytes | LineTooLong] = []
    os.write(w, b"one\nstop\nnever\n")
    with anyio.fail_after(5):
        await feed_lines(source, 1024, got.append, lambda: b"stop\n" in got)
    assert got == [b"one\n", b"stop\n"]

    def boom(line: bytes | LineTooLong) -> None:
        raise ValueError(line)

    os.write(w, b"bad\n")
    with anyio.fail_after(5), pytest.raises(ValueError, match="bad"):
        await feed_lines(source, 1024, boom)
    # The stream is usable again: the pump let go of it (what it had cut is dropped).
    os.write(w, b"later\n")
    assert await source.receive() == b"later\n"
    await source.aclose()
