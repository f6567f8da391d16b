"""Claims on steps in flight: scorers that share a cache judge each step once.

Theory of operation
-------------------
A scorer about to ask the judge about a step *claims* it in the shared cache. A claim
is a row (or, in a networked store, a key) naming its holder and an expiry time:

* no verdict and no live claim: the claim is taken, the scorer asks the judge;
* a verdict already stored: it is served, nothing is asked;
* a live claim of another holder: the scorer *waits*: it asks again later (every
  :data:`POLL_INTERVAL`, sooner when the claim expires first) and gets the verdict once
  the holder stored it, or the claim once the holder released it (its judgment failed)
  or let it expire (it crashed or hung).

The holder *refreshes* its claims while its judge calls are in flight (every third of
the claim's lifetime), stores each judgment and drops its claim in one write, and
*releases* the claims of steps it could not judge. A claim that is never finished expires
after :data:`DEFAULT_CLAIM_TTL` seconds (``$LITMUS_CACHE_CLAIM_TTL``); a holder that is
known to be dead - a process of this host that no longer exists - is overtaken at once.

:class:`StepClaims` is what a store offers for this; the SQLite cache implements it with
a claims table and ``BEGIN IMMEDIATE`` transactions, the Redis cache
(:mod:`litmus_sandbox._store.redis_cache`) with ``SET key owner NX PX ttl`` (claim), a
check-and-``PEXPIRE`` script (refresh) and a check-and-``DEL`` script (release). The decisions here are plain functions of the
clock's time, so they are tested with a fake clock.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._model.errors import ConfigError

#: ``(judge fingerprint, step content hash, context hash)``: what a verdict is cached by.
CacheKey = tuple[str, str, str]

#: Seconds a claim lives unless its holder refreshes it.
DEFAULT_CLAIM_TTL = 30.0
#: The environment variable that sets the claims' lifetime, in seconds.
CLAIM_TTL_ENV = "LITMUS_CACHE_CLAIM_TTL"
#: Seconds between two looks of a waiting scorer at the steps others hold.
POLL_INTERVAL = 0.2
#: The shortest wait before looking again (a claim that expires now is not spun on).
MIN_POLL = 0.02


@dataclass(frozen=True)
class Claim:
    """What claiming one step gave.

    Exactly one holds: ``judgment`` (the step was judged: its verdict), ``held`` (the
    claim is this scorer's: ask the judge), or neither (another holder's claim lives
    until ``until``, on the store's clock: wait).
    """

    judgment: StepJudgment | None = None
    held: bool = False
    until: float = 0.0


class StepClaims(Protocol):
    """A shared store's claims on steps in flight (see the module docstring)."""

    #: Seconds a claim lives unless refreshed.
    claim_ttl: float
    #: This scorer's name in the claims it holds.
    owner: str

    def clock(self) -> float:
        """The store's time (seconds): claims expire by it."""
        ...

    def claim(self, keys: Sequence[CacheKey]) -> list[Claim]:
        """Claim each step for this scorer, unless it is judged or claimed by a live
        holder; also how a waiting scorer looks again (wait for the verdict)."""
        ...

    def refresh(self, keys: Iterable[CacheKey]) -> None:
        """Extend this scorer's claims on ``keys`` by a full lifetime from now."""
        ...

    def release(self, keys: Iterable[CacheKey]) -> None:
        """Drop this scorer's claims on ``keys`` (their judgments failed)."""
        ...

    def put_many(self, items: Sequence[tuple[CacheKey, StepJudgment]]) -> None:
        """Store judgments and drop this scorer's claims on their steps, in one write."""
        ...


def new_owner() -> str:
    """A holder's name: ``host:pid:nonce`` (the host and pid tell whether it is alive)."""
    return f"{os.uname().nodename}:{os.getpid()}:{secrets.token_hex(4)}"


def holder_alive(holder: str) -> bool:
    """Whether the process named by ``holder`` may still be running: False only for a
    process of this host that no longer exists (a killed scorer); a holder of another
    host, or one that cannot be told, counts as alive and is waited for until its claim
    expires."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != os.uname().nodename or not pid_text.isdigit() or os.name != "posix":
        return True
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists (another user's): alive
    return True


def claimable(
    holder: str | None, expires: float, owner: str, now: float, alive: Callable[[str], bool]
) -> bool:
    """Whether ``owner`` may take, at ``now``, a step whose claim is ``holder``'s (None:
    unclaimed) until ``expires``; ``alive`` tells whether a holder may still run (asked
    only of a live claim of another holder)."""
    return holder is None or holder == owner or expires <= now or not alive(holder)


def poll_delay(until: float, now: float, interval: float = POLL_INTERVAL) -> float:
    """How long a waiting scorer sleeps before looking again at a step claimed until
    ``until``: the poll interval, or less when the claim expires sooner."""
    return max(MIN_POLL, min(interval, until - now))


def refresh_every(ttl: float) -> float:
    """How often a holder refreshes its claims: a third of their lifetime, so that one
    late refresh does not let a claim lapse."""
    return ttl / 3


def claim_ttl_from_env() -> float:
    """``$LITMUS_CACHE_CLAIM_TTL`` in seconds, else :data:`DEFAULT_CLAIM_TTL`.

    Raises:
        ConfigError: the variable is not a positive number.
    """
    text = os.environ.get(CLAIM_TTL_ENV, "").strip()
    if not text:
        return DEFAULT_CLAIM_TTL
    try:
        ttl = float(text)
    except ValueError:
        ttl = -1.0
    if not 0 < ttl < float("inf"):
        raise ConfigError(f"${CLAIM_TTL_ENV}: {text!r} is not a positive number of seconds")
    return ttl
