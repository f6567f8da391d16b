"""The step-verdict cache on a real ``redis-server`` (loopback, free port): the same
verdicts as SQLite, claims taken, waited for, refreshed, released, expired and overtaken,
values served only when written whole, a restart that serves nothing wrong, and one
clear line when the server is down."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_server import RedisServer, free_port, redis_server

from litmus_sandbox import ConfigError, VerdictCache
from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._model.errors import CacheError
from litmus_sandbox._store.redis_cache import (
    RedisVerdictCache,
    claim_key,
    encode_value,
    verdict_key,
)
from litmus_sandbox._store.step_cache import StepCache, display_url, open_cache

K1 = ("judge-fp", "step-1", "ctx-1")
K2 = ("judge-fp", "step-2", "ctx-2")
SAFE = StepJudgment(safe=True, reason="fine", model="m", system_fingerprint="fp")
UNSAFE = StepJudgment(safe=False, evidence="observed", rules=("r1",), attempts=2)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as s:
        yield s


@pytest.fixture
def url(server: RedisServer) -> str:
    server.client().flushdb()
    return server.url


def scorer(url: str, name: str, ttl: float = 10.0, **kw: object) -> RedisVerdictCache:
    return RedisVerdictCache(url, claim_ttl=ttl, owner=f"host-{name}:1:{name}", **kw)  # type: ignore[arg-type]


def test_it_serves_what_sqlite_serves_under_the_same_keys(url: str, tmp_path: Path) -> None:
    stores: list[StepCache] = [open_cache(url), open_cache(f"sqlite:///{tmp_path}/c.sqlite")]
    for store in stores:
        with store:
            store.put_many([(K1, SAFE), (K2, UNSAFE)])
            assert (store.get(K1), store.get(K2), store.get(("other", *K1[1:]))) == (
                SAFE,
                UNSAFE,
                None,
            )
            assert store.get_many([K2, ("x", "y", "z"), K1]) == [UNSAFE, None, SAFE]
            assert store.missing([K1, K2, K2, ("x", "y", "z")]) == 1
            assert len(store) == 2
    assert verdict_key(K1) == b'litmus-sandbox:verdict:["judge-fp","step-1","ctx-1"]'


def test_the_url_forms_open_the_right_store(url: str, tmp_path: Path) -> None:
    with open_cache(str(tmp_path / "plain.sqlite")) as plain:
        assert isinstance(plain, VerdictCache)
        assert plain.path == str(tmp_path / "plain.sqlite")
    with open_cache(f"sqlite:///{tmp_path}/u.sqlite") as by_url:
        assert isinstance(by_url, VerdictCache)
        assert by_url.path == f"{tmp_path}/u.sqlite"
    with open_cache(url) as shared:
        assert isinstance(shared, RedisVerdictCache)
        assert shared.files() == []
    for bad in ("sqlite://", "sqlite:///", "memcached://h:1", "redis://127.0.0.1:notaport/0"):
        with pytest.raises(ConfigError):
            open_cache(bad)


def test_a_password_is_never_shown() -> None:
    assert display_url("redis://:s3cret@h:1/0") == "redis://:***@h:1/0"
    assert display_url("redis://me:s3cret@h:1/0") == "redis://me:***@h:1/0"
    assert "s3cret" not in display_url("unix:///run/r.sock?db=1&password=s3cret")
    port = free_port()  # nothing listens there
    with pytest.raises(CacheError) as caught:
        RedisVerdictCache(f"redis://me:s3cret@127.0.0.1:{port}/0")
    assert "s3cret" not in str(caught.value)
    assert "***" in str(caught.value)


def test_a_server_that_is_down_is_one_clear_line() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(CacheError) as caught:
        open_cache(f"redis://127.0.0.1:{port}/0")
    message = str(caught.value)
    assert message.startswith(f"redis://127.0.0.1:{port}/0: verdict cache: connecting failed: ")
    assert "\n" not in message
    assert "refused" in message.lower()
    assert time.monotonic() - started < 10


def test_the_first_claim_wins_the_other_waits_and_gets_the_verdict(url: str) -> None:
    a, b = scorer(url, "a"), scorer(url, "b")
    (first,) = a.claim([K1])
    assert first.held
    assert first.judgment is None
    (second,) = b.claim([K1])
    assert not second.held
    assert second.judgment is None
    assert 9.0 < second.until - time.time() <= 10.0  # the holder's time left
    assert a.claim([K1])[0].held  # its own again
    b.release([K1])  # not its claim: nothing happens
    assert not b.claim([K1])[0].held
    a.put_many([(K1, SAFE)])  # stored, and a's claim dropped in the same transaction
    assert b.claim([K1])[0].judgment == SAFE
    assert a.claims() == []


def test_a_released_claim_is_taken_by_the_next_scorer(url: str) -> None:
    a, b = scorer(url, "a"), scorer(url, "b")
    assert a.claim([K1, K2])[0].held
    a.release([K1])
    k1, k2 = b.claim([K1, K2])
    assert k1.held
    assert not k2.held
    assert {(key, holder) for key, holder, _ in a.claims()} == {
        (K1, "host-b:1:b"),
        (K2, "host-a:1:a"),
    }


def test_a_claim_expires_on_the_server_unless_refreshed(url: str) -> None:
    a, b = scorer(url, "a", ttl=0.4), scorer(url, "b", ttl=0.4)
    assert a.claim([K1, K2])[0].held
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:  # a refreshes K1 only
        a.refresh([K1])
        time.sleep(0.05)
    time.sleep(0.2)
    k1, k2 = b.claim([K1, K2])
    assert not k1.held  # kept alive by its holder
    assert k2.held  # lapsed: taken


def test_a_dead_holders_claim_is_taken_at_once(url: str) -> None:
    ghost = scorer(url, "ghost", ttl=60)
    assert ghost.claim([K1])[0].held
    other_host = scorer(url, "y", ttl=60, alive=lambda holder: True)
    assert not other_host.claim([K1])[0].held  # cannot tell: waits for the expiry
    me = scorer(url, "me", ttl=60, alive=lambda holder: holder != "host-ghost:1:ghost")
    assert me.claim([K1])[0].held
    assert [holder for _, holder, _ in me.claims()] == ["host-me:1:me"]


def test_a_claim_lost_in_a_restart_is_taken_again_at_the_next_refresh(url: str) -> None:
    a = scorer(url, "a")
    assert a.claim([K1])[0].held
    a._r.delete(claim_key(K1))  # as after a restart that had not persisted it
    a.refresh([K1])
    assert scorer(url, "b").claim([K1])[0].held is False


@pytest.mark.parametrize(
    "damage",
    [
        lambda v: v[: len(v) // 2],  # torn
        lambda v: v.replace(b'"safe":true', b'"safe":false'),  # flipped, checksum stale
        lambda v: v.replace(b"lsv1:", b"lsv9:"),  # another format
        lambda v: b"garbage",
        lambda v: encode_value(K2, SAFE),  # whole, but another step's
    ],
    ids=["torn", "flipped", "newer-format", "garbage", "another-key"],
)
def test_a_value_not_written_whole_is_a_miss_then_judged_again(url: str, damage: object) -> None:
    a = scorer(url, "a")
    a.put(K1, SAFE)
    raw = a._r.get(verdict_key(K1))
    assert isinstance(raw, bytes)
    a._r.set(verdict_key(K1), damage(raw))  # type: ignore[operator]
    assert a.get(K1) is None
    assert a.missing([K1]) == 1
    (claim,) = a.claim([K1])
    assert claim.held
    assert claim.judgment is None
    a.put_many([(K1, UNSAFE)])
    assert a.get(K1) == UNSAFE


def test_a_restart_with_persistence_serves_exactly_what_was_stored(tmp_path: Path) -> None:
    """The server is killed (no clean shutdown) with a claim live and verdicts stored,
    and started again on its append-only file: the verdicts are served, unchanged; the
    lost claim only means the step may be asked again."""
    server = RedisServer(tmp_path / "redis", persist=True)
    server.start()
    try:
        with open_cache(server.url) as cache:
            cache.put_many([(K1, SAFE), (K2, UNSAFE)])
            assert cache.claim([("judge-fp", "step-3", "ctx-3")])[0].held
            server.crash()
            with pytest.raises(CacheError, match="verdict cache: reading a verdict failed"):
                cache.get(K1)
            server.start()
            assert (cache.get(K1), cache.get(K2)) == (SAFE, UNSAFE)  # reconnects
        with open_cache(server.url) as again:
            assert (again.get(K1), again.get(K2), len(again)) == (SAFE, UNSAFE, 2)
    finally:
        server.stop()
