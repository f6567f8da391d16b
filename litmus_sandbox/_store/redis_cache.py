"""The step-verdict cache on a Redis server, shared by every scorer of a cluster.

Theory of operation
-------------------
The keys and claims of the SQLite cache (:class:`~litmus_sandbox._store.step_cache.
StepCache`), on one Redis database:

* A **verdict** is the string ``litmus-sandbox:verdict:["JUDGE","STEP","CONTEXT"]``
  (the key exactly as the SQLite cache has it: judge fingerprint, step content hash,
  context hash). Its value is ``lsv1:SHA256:ENTRY``: the format version, the SHA-256 of
  ENTRY, and ENTRY, the JSON of the key and the judgment. One ``SET`` writes it whole.
  A value is served only if its version is this one, its checksum matches, it decodes
  strictly and it names its own key; anything else (damaged, foreign, newer) is a miss:
  the step is judged again and the value overwritten. Never a wrong verdict. Emulated
  results live beside them, ``litmus-sandbox:emulation:[...]`` (``emulation_cache.py``).
* A **claim** is the string ``litmus-sandbox:claim:[...]`` holding its holder's name,
  taken with ``SET NX PX ttl``: it expires on the server's clock whatever becomes of its
  holder. Small Lua scripts, atomic on the server, do each look-then-act: *claim* (serve
  the stored verdict, else take or extend the claim, else tell the holder and the time
  left), *take over* a dead holder's claim (only if it still holds it), *refresh* and
  *release* only one's own claim, and *store* a verdict while dropping one's own claim.

A server restart loses what the server had not persisted: verdicts (judged again) and
claims (a step may be asked twice; a holder's next refresh takes its lost claim again).
A dropped connection is retried a few times by the client (every script is idempotent);
past that, any Redis error is one :class:`CacheError` naming the server (its password
masked) and what failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import redis
from redis.commands.core import Script
from redis.exceptions import RedisError

from litmus_sandbox._core.emulation import EmulationAnswer, EmulationKey
from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._model.errors import CacheError, ConfigError
from litmus_sandbox._store.cache_urls import display_url
from litmus_sandbox._store.claims import (
    CacheKey,
    Claim,
    claim_ttl_from_env,
    holder_alive,
    new_owner,
)
from litmus_sandbox._store.emulation_cache import (
    decode_entry,
    encode_entry,
    redis_key,
    seal,
    unseal,
)

__all__ = ["FORMAT", "RedisVerdictCache"]

#: The value format's version: a value of any other is never served.
FORMAT = b"lsv1"
#: What every key of this cache starts with.
PREFIX = "litmus-sandbox"
#: Keys per round trip when many are read at once.
_CHUNK = 500
_CONNECT_TIMEOUT = 5.0
_TIMEOUT = 30.0

_CLAIM = """
if ARGV[3] ~= '1' then
  local v = redis.call('GET', KEYS[1])
  if v then return {0, v} end
end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1} end
local holder = redis.call('GET', KEYS[2])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {1}
end
return {2, holder, redis.call('PTTL', KEYS[2])}
"""
_TAKE_OVER = """
if redis.call('GET', KEYS[1]) ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
_REFRESH = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_STORE = """
redis.call('SET', KEYS[1], ARGV[1])
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
return 1
"""


class _Entry(msgspec.Struct, frozen=True, kw_only=True):
    """What a verdict's value holds after its header: the key it belongs to, and it."""

    key: tuple[str, str, str]
    judgment: StepJudgment


_encode = msgspec.json.Encoder(order="deterministic").encode
_decode_entry = msgspec.json.Decoder(_Entry).decode


class RedisVerdictCache:
    """The step-verdict cache on a Redis database (see the module docstring).

    Args:
        url: ``redis://[[USER]:PASSWORD@]HOST:PORT/DB``, ``rediss://…`` (TLS) or
            ``unix:///PATH?db=N``.
        claim_ttl: seconds a claim lives unless refreshed (None: ``$LITMUS_CACHE_CLAIM_TTL``,
            else 30).
        clock: this process's time, by which a waiting scorer schedules its next look
            (claims themselves expire on the server's clock).
        owner: this scorer's name in its claims (None: host, pid and a nonce).
        alive: whether a claim's holder may still run (False: its claim is taken at once).

    Raises:
        ConfigError: ``url`` cannot be read, or the claims' lifetime variable is not a
            positive number.
        CacheError: the server cannot be reached or refuses us.
    """

    def __init__(
        self,
        url: str,
        *,
        claim_ttl: float | None = None,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
        alive: Callable[[str], bool] = holder_alive,
    ) -> None:
        self.location = display_url(url)
        self.claim_ttl = claim_ttl if claim_ttl is not None else claim_ttl_from_env()
        self.owner = owner if owner is not None else new_owner()
        self._ttl_ms = max(1, round(self.claim_ttl * 1000))
        self._clock = clock
        self._alive = alive
        self._secret = _password(url)
        try:
            self._r = redis.Redis.from_url(
                url, socket_connect_timeout=_CONNECT_TIMEOUT, socket_timeout=_TIMEOUT
            )
        except (ValueError, TypeError, RedisError) as exc:
            problem = self._scrub(str(exc))
            raise ConfigError(
                f"cache {self.location!r}: not a usable Redis URL ({problem})"
            ) from None
        self._claim = self._r.register_script(_CLAIM)
        self._take_over = self._r.register_script(_TAKE_OVER)
        self._refresh = self._r.register_script(_REFRESH)
        self._release = self._r.register_script(_RELEASE)
        self._store = self._r.register_script(_STORE)
        with self._guard("connecting"):
            self._r.ping()

    def clock(self) -> float:
        """This process's time (see the constructor)."""
        return self._clock()

    # ------------------------------------------------------------ verdicts

    def get(self, key: CacheKey) -> StepJudgment | None:
        with self._guard("reading a verdict"):
            raw = self._r.get(verdict_key(key))
        return decode_value(key, raw)

    def get_many(self, keys: Sequence[CacheKey]) -> list[StepJudgment | None]:
        out: list[StepJudgment | None] = []
        with self._guard("reading verdicts"):
            for start in range(0, len(keys), _CHUNK):
                chunk = keys[start : start + _CHUNK]
                raws = self._r.mget([verdict_key(key) for key in chunk])
                out += [decode_value(k, raw) for k, raw in zip(chunk, raws, strict=True)]
        return out

    def put(self, key: CacheKey, judgment: StepJudgment) -> None:
        self.put_many([(key, judgment)])

    def put_many(self, items: Iterable[tuple[CacheKey, StepJudgment]]) -> None:
        """Store several judgments, and drop this scorer's claims on their steps, in one
        transaction (``MULTI``/``EXEC``)."""
        items = list(items)
        if not items:
            return
        with self._guard(f"storing {len(items)} judgment(s)"), self._r.pipeline() as pipe:
            for key, judgment in items:
                keys = [verdict_key(key), claim_key(key)]
                self._store(keys=keys, args=[encode_value(key, judgment), self.owner], client=pipe)
            pipe.execute()

    def missing(self, keys: Iterable[CacheKey]) -> int:
        """How many distinct keys have no verdict served (absent, or not whole)."""
        return sum(j is None for j in self.get_many(list(set(keys))))

    def __len__(self) -> int:
        with self._guard("counting verdicts"):
            return sum(1 for _ in self._r.scan_iter(match=f"{PREFIX}:verdict:*", count=1000))

    # ------------------------------------------------------------ emulated results

    def get_emulation(self, key: EmulationKey) -> EmulationAnswer | None:
        """The emulated result kept for ``key`` (``emulation_cache.py``), or None."""
        with self._guard("reading an emulated result"):
            raw = self._r.get(redis_key(PREFIX, key))
        return decode_entry(key, raw)

    def put_emulation(self, key: EmulationKey, answer: EmulationAnswer) -> None:
        """Keep one emulated result (one ``SET``: whole or not at all)."""
        with self._guard("storing an emulated result"):
            self._r.set(redis_key(PREFIX, key), encode_entry(key, answer))

    # ------------------------------------------------------------ claims

    def claim(self, keys: Sequence[CacheKey]) -> list[Claim]:
        """For each key: its verdict when stored; else this scorer's claim when the step
        is unclaimed, claimed by this scorer or held by a dead process; else until when
        its live holder's claim lasts (by this process's clock). One round trip."""
        if not keys:
            return []
        with self._guard(f"claiming {len(keys)} step(s)"):
            with self._r.pipeline(transaction=False) as pipe:
                for key in keys:
                    self._claim(keys=self._pair(key), args=self._claim_args("0"), client=pipe)
                replies = pipe.execute()
            now = self._clock()
            return [self._claimed(k, r, now) for k, r in zip(keys, replies, strict=True)]

    def refresh(self, keys: Iterable[CacheKey]) -> None:
        """Extend this scorer's claims on ``keys`` to a full lifetime from now (and take
        again those a server restart lost)."""
        self._each(self._refresh, keys, [self.owner, self._ttl_ms], "refreshing")

    def release(self, keys: Iterable[CacheKey]) -> None:
        """Drop this scorer's claims on ``keys`` (never another holder's)."""
        self._each(self._release, keys, [self.owner], "releasing")

    def claims(self) -> list[tuple[CacheKey, str, float]]:
        """Every claim: step, holder, expiry by this process's clock (for tests)."""
        out: list[tuple[CacheKey, str, float]] = []
        with self._guard("reading claims"):
            names = list(self._r.scan_iter(match=f"{PREFIX}:claim:*", count=1000))
            with self._r.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.get(name)
                    pipe.pttl(name)
                replies = pipe.execute()
        now = self._clock()
        for i, name in enumerate(names):
            holder, left = replies[2 * i], replies[2 * i + 1]
            if holder is None:
                continue  # expired meanwhile
            key = msgspec.json.decode(bytes(name)[len(_CLAIM_PREFIX) :], type=tuple[str, str, str])
            out.append((key, _text(holder), now + max(int(left), 0) / 1000))
        return out

    # ------------------------------------------------------------ plumbing

    def files(self) -> list[Path]:
        """None: the cache lives on the server."""
        return []

    def close(self) -> None:
        with self._guard("closing"):
            self._r.close()

    def __enter__(self) -> RedisVerdictCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _claimed(self, key: CacheKey, reply: Any, now: float) -> Claim:
        kind = int(reply[0])
        if kind == 0:
            judgment = decode_value(key, reply[1])
            if judgment is not None:
                return Claim(judgment=judgment)
            # Not stored whole: as if absent (it is judged again, then overwritten).
            reply = self._claim(keys=self._pair(key), args=self._claim_args("1"))
            kind = int(reply[0])
        if kind == 1:
            return Claim(held=True, until=now + self.claim_ttl)
        raw_holder, left = bytes(reply[1]), int(reply[2])
        if not self._alive(_text(raw_holder)):
            args: list[bytes | str | int] = [self.owner, self._ttl_ms, raw_holder]
            if self._take_over(keys=[claim_key(key)], args=args) == 1:
                return Claim(held=True, until=now + self.claim_ttl)
        return Claim(until=now + (left / 1000 if left >= 0 else self.claim_ttl))

    def _claim_args(self, skip_verdict: str) -> list[str | int]:
        return [self.owner, self._ttl_ms, skip_verdict]

    @staticmethod
    def _pair(key: CacheKey) -> list[bytes]:
        return [verdict_key(key), claim_key(key)]

    def _each(
        self, script: Script, keys: Iterable[CacheKey], args: list[str | int], what: str
    ) -> None:
        keys = list(keys)
        if not keys:
            return
        guard = self._guard(f"{what} {len(keys)} claim(s)")
        with guard, self._r.pipeline(transaction=False) as pipe:
            for key in keys:
                script(keys=[claim_key(key)], args=args, client=pipe)
            pipe.execute()

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """Turn Redis's errors into one :class:`CacheError` naming the server."""
        try:
            yield
        except RedisError as exc:
            problem = self._scrub(" ".join(str(exc).split()) or type(exc).__name__)
            raise CacheError(f"{self.location}: verdict cache: {what} failed: {problem}") from None


_VERDICT_PREFIX = f"{PREFIX}:verdict:".encode()
_CLAIM_PREFIX = f"{PREFIX}:claim:".encode()


def verdict_key(key: CacheKey) -> bytes:
    """The Redis key of ``key``'s verdict."""
    return _VERDICT_PREFIX + _encode(key)


def claim_key(key: CacheKey) -> bytes:
    """The Redis key of ``key``'s claim."""
    return _CLAIM_PREFIX + _encode(key)


def encode_value(key: CacheKey, judgment: StepJudgment) -> bytes:
    """A verdict's value: ``lsv1:SHA256:ENTRY`` (see the module docstring)."""
    body = _encode(_Entry(key=key, judgment=judgment))
    return seal(FORMAT, body)


def decode_value(key: CacheKey, raw: object) -> StepJudgment | None:
    """The judgment in ``raw`` if it was written whole, by this format, for ``key``;
    else None (a miss, never a guess)."""
    body = unseal(FORMAT, raw)
    if body is None:
        return None
    try:
        entry = _decode_entry(body)
    except msgspec.DecodeError:
        return None
    return entry.judgment if entry.key == tuple(key) else None


def _text(raw: object) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def _password(url: str) -> str | None:
    try:
        return urlsplit(url).password or None
    except ValueError:
        return None
