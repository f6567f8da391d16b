"""Scoring on a Ray cluster: shards of episodes as Ray tasks, verdicts in the local order.

Theory of operation
-------------------
``score --engine ray`` (``rebaseline`` and ``gate --candidate-episodes`` too) scores
through a :class:`RayEngine`, the :class:`~litmus_sandbox._runtime.scorer.Engine` seam the
local scorer fills:

* The driver (this process) reads the episodes with the local scorer's reader (same
  warnings, same errors naming ``file:line``) and cuts them, in reading order, into
  *shards*: consecutive episodes holding at least ``steps_per_task`` recorded steps (the
  last one may hold fewer). An episode is never split.
* Each shard is one Ray task asking for 1 CPU. The task opens the shared cache and one
  judge session, and scores its episodes exactly as the local scorer does
  (:func:`~litmus_sandbox._runtime.scorer.score_all`): the judge's ``max_concurrency`` is
  each task's own limit. It returns every episode's verdict (None: a step got none) and
  its costs.
* The driver keeps at most :data:`IN_FLIGHT_PER_CPU` shards per CPU of the cluster in
  flight (memory stays bounded whatever the input) and takes the results in shard order:
  the verdict stream it writes is the one local scoring writes, byte for byte.
* Progress: each task tells a small tally actor its steps settled (from a thread, every
  :data:`REPORT_EVERY` seconds while they change, and once at its end); while it waits,
  the driver adds those of the shards in flight to the finished shards' exact counts:
  steps judged across the cluster.
* A worker that dies mid-shard (its process killed, its node lost) is a Ray system
  failure: the task runs again, up to :data:`MAX_RETRIES` times. Each step it had answered
  was stored in the shared cache within about 0.02 s of its answer, so the retry pays only
  for the steps in flight at the death. The dead worker's claims on them are taken over at
  once on the same host, after the claim's lifetime (``$LITMUS_CACHE_CLAIM_TTL``) elsewhere.

The cache must be one every worker reaches (:func:`cache_for_cluster`): a ``redis://``
server, or a SQLite file only when every node of the cluster runs on this machine (SQLite
on a network filesystem is not safe). Each task checks again where it runs (a node that
joined later), and that it runs the driver's version of litmus-sandbox.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import ray
import ray.exceptions

from litmus_sandbox._model.about import package_version
from litmus_sandbox._model.errors import (
    CacheError,
    ConfigError,
    JudgeError,
    LitmusError,
    UpstreamError,
)
from litmus_sandbox._model.records import Episode, Verdict
from litmus_sandbox._runtime.scorer import Progress, score_all
from litmus_sandbox._runtime.scoring_job import ScoreStats
from litmus_sandbox._store.step_cache import open_cache, sqlite_path
from litmus_sandbox.judges import ScoringConfig

__all__ = ["MAX_RETRIES", "STEPS_PER_TASK", "RayEngine", "cache_for_cluster", "foreign_nodes"]

#: Recorded steps per task, unless told (``--steps-per-task``).
STEPS_PER_TASK = 1000
#: Shards in flight per CPU of the cluster (one running, one waiting to start).
IN_FLIGHT_PER_CPU = 2
#: Seconds between two progress reports of a task, and between two looks of the driver.
REPORT_EVERY = 0.25
#: Times a task runs again when its worker dies (Ray's default for tasks).
MAX_RETRIES = 3


def shards(episodes: Iterable[Episode], steps: int) -> Iterator[list[Episode]]:
    """Consecutive episodes holding at least ``steps`` recorded steps each (the last may
    hold fewer); an episode is never split."""
    shard: list[Episode] = []
    held = 0
    for episode in episodes:
        shard.append(episode)
        held += len(episode.steps)
        if held >= steps:
            yield shard
            shard, held = [], 0
    if shard:
        yield shard


def foreign_nodes(nodes: Sequence[Mapping[str, Any]], host: str) -> list[str]:
    """The live nodes of ``ray.nodes()`` that do not run on ``host``, by name."""
    return sorted(
        {
            str(n.get("NodeManagerHostname") or n.get("NodeManagerAddress"))
            for n in nodes
            if n.get("Alive") and n.get("NodeManagerHostname") != host
        }
    )


def cache_for_cluster(spec: str) -> tuple[str, str | None]:
    """The cache ``spec`` as every worker opens it, and the host its workers must run on
    (None: any; a SQLite file is on this host, its path made absolute).

    Raises:
        ConfigError: as :func:`~litmus_sandbox._store.step_cache.sqlite_path`.
    """
    path = sqlite_path(spec)
    if path is None:
        return spec, None
    if path == ":memory:":
        raise ConfigError(
            "--engine ray: an in-memory cache is no cache the workers share; give --cache "
            "redis://HOST:PORT/DB"
        )
    return os.path.abspath(os.path.expanduser(path)), os.uname().nodename


@dataclass(frozen=True)
class _Job:
    """What every task of one scoring is told besides its episodes."""

    cache: str
    #: The only host the workers may run on (a SQLite cache), else None.
    host: str | None
    version: str


@ray.remote(num_cpus=0)
class _Tally:
    """Steps settled so far by the task of each shard in flight (its latest report)."""

    def __init__(self) -> None:
        self.counts: dict[int, tuple[int, int]] = {}

    def report(self, shard: int, calls: int, hits: int) -> None:
        self.counts[shard] = (calls, hits)

    def read(self) -> dict[int, tuple[int, int]]:
        return dict(self.counts)


@ray.remote(num_cpus=1, max_retries=MAX_RETRIES)
def _score_shard(
    config: ScoringConfig, job: _Job, shard: int, episodes: list[Episode], tally: Any
) -> tuple[list[Verdict | None], ScoreStats]:
    """One task: score ``episodes`` here, through the shared cache."""
    where = os.uname().nodename
    if job.version != package_version():
        raise ConfigError(
            f"Ray node {where} runs litmus-sandbox {package_version()}, the command "
            f"{job.version}: install the same version on every node"
        )
    if job.host is not None and where != job.host:
        raise ConfigError(
            f"--engine ray: the cache {job.cache} is a SQLite file on {job.host}; Ray node "
            f"{where} cannot share it: give --cache redis://HOST:PORT/DB"
        )
    stats = ScoreStats()
    try:
        with open_cache(job.cache) as cache, _reporting(tally, shard, stats):
            verdicts, _ = score_all(episodes, config, cache, stats, None)
    except LitmusError as exc:  # a key not set, a cache not reached: say where
        raise _same_family(exc, f"{exc} (on Ray node {where})") from None
    return verdicts, stats


@contextmanager
def _reporting(tally: Any, shard: int, stats: ScoreStats) -> Iterator[None]:
    """Tell ``tally`` the steps settled in ``stats``: every :data:`REPORT_EVERY` seconds
    while they change (from a thread: the scorer's loop never waits for it), and once
    more at the end."""
    if tally is None:
        yield
        return
    stop = threading.Event()

    def report() -> None:
        told = (-1, -1)
        while True:
            now = (stats.judge_calls, stats.cache_hits)
            if now != told:
                tally.report.remote(shard, *now)
                told = now
            if stop.wait(REPORT_EVERY):
                return

    thread = threading.Thread(target=report, name="litmus-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        tally.report.remote(shard, stats.judge_calls, stats.cache_hits)


@dataclass
class _InFlight:
    number: int
    ref: ray.ObjectRef[tuple[list[Verdict | None], ScoreStats]]
    first: str
    last: str


class RayEngine:
    """Score on a Ray cluster (see the module docstring).

    Args:
        cache: the step-verdict cache every worker opens (a Redis URL; a SQLite path
            only when every node runs on this machine).
        address: the cluster (``HOST:PORT`` of its head, or ``auto``: what ``ray.init`` takes);
            None: ``$RAY_ADDRESS``, else a cluster started on this machine, else a new
            local one.
        steps_per_task: recorded steps per shard (each a Ray task).

    Raises:
        ConfigError: a cache the workers cannot share; a worker that runs another version.
        UpstreamError: the cluster cannot be reached; a task failed on every try.
    """

    def __init__(
        self, *, cache: str, address: str | None = None, steps_per_task: int = STEPS_PER_TASK
    ) -> None:
        if steps_per_task < 1:
            raise ConfigError("--steps-per-task must be 1 or more")
        spec, self.host = cache_for_cluster(cache)
        self.job = _Job(spec, self.host, package_version())
        self.address = address
        self.steps_per_task = steps_per_task
        self._connected = False

    def connect(self) -> None:
        """Join the cluster (once), and check that every node reaches the cache."""
        if self._connected:
            return
        if not ray.is_initialized():
            _check_reachable(self.address or os.environ.get("RAY_ADDRESS"))
            try:
                ray.init(address=self.address, logging_level=logging.WARNING, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = self.address or os.environ.get("RAY_ADDRESS") or "this machine"
                raise UpstreamError(f"cannot reach the Ray cluster at {where}: {exc}") from exc
            self._connected = True
        if self.host is None:
            return
        nodes = ray.nodes()  # type: ignore[no-untyped-call]  # not annotated in ray
        if elsewhere := foreign_nodes(nodes, self.host):
            raise ConfigError(
                f"--engine ray: the cache {self.job.cache} is a SQLite file on {self.host}; "
                f"Ray node(s) {', '.join(elsewhere)} run elsewhere and cannot share it "
                "(SQLite on a network filesystem is not safe): give --cache redis://HOST:PORT/DB"
            )

    def close(self) -> None:
        """Leave the cluster, if this engine joined it."""
        if self._connected:
            ray.shutdown()
            self._connected = False

    def __call__(
        self,
        episodes: Iterable[Episode],
        config: ScoringConfig,
        stats: ScoreStats,
        progress: Progress | None,
    ) -> list[Verdict | None]:
        self.connect()
        config_ref = ray.put(config)
        # An actor class's remote() is made by the decorator: mypy does not see it.
        tally = _Tally.remote() if progress is not None else None  # type: ignore[attr-defined]
        live = _Live(stats, progress, tally)
        out: list[Verdict | None] = []
        flight: deque[_InFlight] = deque()
        try:
            for number, shard in enumerate(shards(episodes, self.steps_per_task)):
                while len(flight) >= _window():
                    out.extend(self._finish(flight.popleft(), stats, live))
                ref = _score_shard.remote(config_ref, self.job, number, shard, tally)
                flight.append(_InFlight(number, ref, shard[0].episode_id, shard[-1].episode_id))
            while flight:
                out.extend(self._finish(flight.popleft(), stats, live))
        finally:
            for left in flight:  # failing: stop paying the judge for what is not wanted
                ray.cancel(left.ref, force=True)
            if tally is not None:
                ray.kill(tally)
        return out

    def _finish(self, head: _InFlight, stats: ScoreStats, live: _Live) -> list[Verdict | None]:
        """Wait for the shard at the head of the window; its verdicts."""
        while live.progress is not None and not ray.wait([head.ref], timeout=REPORT_EVERY)[0]:
            live.show()
        try:
            verdicts, part = ray.get(head.ref)
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, LitmusError):
                raise exc.cause from None  # one line, as the local scorer's would be
            raise
        except ray.exceptions.RayError as exc:
            raise UpstreamError(
                f"the Ray task scoring episodes {head.first!r} to {head.last!r} failed "
                f"{1 + MAX_RETRIES} times: {exc}"
            ) from exc
        _add(stats, part)
        live.finished(head.number)
        return verdicts


class _Live:
    """The progress callback's view: finished shards exactly, the others as reported."""

    def __init__(self, stats: ScoreStats, progress: Progress | None, tally: Any) -> None:
        self.stats = stats
        self.progress = progress
        self.tally = tally
        self._done: set[int] = set()

    def finished(self, number: int) -> None:
        self._done.add(number)
        if self.progress is not None:
            self.progress(self.stats)

    def show(self) -> None:
        assert self.progress is not None
        try:
            counts: dict[int, tuple[int, int]] = ray.get(self.tally.read.remote(), timeout=5)
        except ray.exceptions.RayError:
            counts = {}  # the tally is gone (its node died): the finished shards only
        running = [c for shard, c in counts.items() if shard not in self._done]
        s = self.stats
        view = ScoreStats(
            judge_calls=s.judge_calls + sum(calls for calls, _ in running),
            cache_hits=s.cache_hits + sum(hits for _, hits in running),
            failures=s.failures,
        )
        self.progress(view)


def _check_reachable(address: str | None, timeout: float = 5.0) -> None:
    """Refuse a cluster address nothing listens at, at once (Ray itself would retry for
    minutes). ``auto``, or None (Ray's own look-up), is left to Ray.

    Raises:
        UpstreamError: no connection to ``HOST:PORT`` within ``timeout`` seconds.
    """
    if address is None or address == "auto":
        return
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not port.isdigit():
        raise ConfigError(f"--ray-address {address}: write HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout).close()
    except OSError as exc:
        raise UpstreamError(
            f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}"
        ) from None


def _window() -> int:
    """Shards in flight: :data:`IN_FLIGHT_PER_CPU` per CPU of the cluster as it is now."""
    resources = ray.cluster_resources()  # type: ignore[no-untyped-call]  # not annotated in ray
    cpus = int(resources.get("CPU", 1))
    return max(2, IN_FLIGHT_PER_CPU * cpus)


def _add(stats: ScoreStats, part: ScoreStats) -> None:
    """Add a shard's costs and failures to the whole scoring's."""
    stats.episodes += part.episodes
    stats.steps_covered += part.steps_covered
    stats.judge_calls += part.judge_calls
    stats.cache_hits += part.cache_hits
    stats.retries += part.retries
    stats.fallbacks += part.fallbacks
    stats.incomplete += part.incomplete
    stats.failures.extend(part.failures)
    stats.failed_episodes += part.failed_episodes


def _same_family(cause: LitmusError, message: str) -> LitmusError:
    """An error saying ``message``, of ``cause``'s family (whose fault it is)."""
    for family in (ConfigError, CacheError, JudgeError, UpstreamError):
        if isinstance(cause, family):
            return family(message)
    return LitmusError(message)
