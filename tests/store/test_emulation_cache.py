"""Emulated results kept beside the step verdicts: SQLite (a table of the verdict cache's
file) and a real redis-server; only what reads back whole, for its own key, is served."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_server import RedisServer, redis_server

from litmus_sandbox import VerdictCache
from litmus_sandbox._core.emulation import EmulationAnswer
from litmus_sandbox._runtime.emulator import emulation_cache_of
from litmus_sandbox._store.emulation_cache import EmulationCache, redis_key
from litmus_sandbox._store.redis_cache import PREFIX, RedisVerdictCache

KEY = ("fp1", "send_money", "a" * 64, "c" * 64)
ANSWER = EmulationAnswer(content='{"result": {"id": 1}}', model="m", attempts=2)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as s:
        yield s


def test_sqlite_keeps_emulated_results_beside_the_verdicts(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    with VerdictCache(path) as cache:
        assert isinstance(cache, EmulationCache)
        assert cache.get_emulation(KEY) is None
        cache.put_emulation(KEY, ANSWER)
        assert len(cache) == 0  # no verdict: its own table
    with VerdictCache(path) as cache:  # kept on disk
        assert cache.get_emulation(KEY) == ANSWER
        assert cache.get_emulation((*KEY[:3], "d" * 64)) is None  # another context
    with sqlite3.connect(path) as db:
        db.execute("UPDATE emulated_results SET answer = ?", (b"{not json",))
    with VerdictCache(path) as cache:
        assert cache.get_emulation(KEY) is None  # damaged: a miss, never a guess


def test_an_older_cache_file_gets_the_table_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE step_verdicts (judge TEXT NOT NULL, step TEXT NOT NULL, "
            "context TEXT NOT NULL, judgment BLOB NOT NULL, PRIMARY KEY (judge, step, context))"
        )
    cache = emulation_cache_of(str(path), default=tmp_path / "unused.sqlite")
    try:
        cache.put_emulation(KEY, ANSWER)
        assert cache.get_emulation(KEY) == ANSWER
    finally:
        cache.close()
    assert not (tmp_path / "unused.sqlite").exists()


def test_redis_keeps_emulated_results_whole_or_not_at_all(server: RedisServer) -> None:
    server.client().flushdb()
    cache = emulation_cache_of(server.url, default="unused")
    assert isinstance(cache, RedisVerdictCache)
    try:
        assert cache.get_emulation(KEY) is None
        cache.put_emulation(KEY, ANSWER)
        assert cache.get_emulation(KEY) == ANSWER
        raw = server.client().get(redis_key(PREFIX, KEY))
        assert isinstance(raw, bytes)
        assert raw.startswith(b"lse1:")
        # A value whose checksum does not match, or that names another key, is a miss.
        tampered = raw.replace(b'"attempts":2', b'"attempts":3')
        assert tampered != raw
        server.client().set(redis_key(PREFIX, KEY), tampered)
        assert cache.get_emulation(KEY) is None
        other = (*KEY[:3], "e" * 64)
        server.client().set(redis_key(PREFIX, other), raw)
        assert cache.get_emulation(other) is None
    finally:
        cache.close()
