"""``litmus-sandbox score`` as real processes against the loopback judge, for the tests
and the benchmark of a shared, durable cache (``bench/kill_rescore_bench.py``).

A suite of episodes whose every step names itself (``step E.K``), so a request at the
endpoint tells which step it judges; a policy with the openai judge on the endpoint; a
``score`` process started with its own environment; and the cache file read from
outside (its stored steps and its claims), as another process sees it: a SQLite file,
or a Redis URL.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import redis
from factories import end, header, msg
from judge_endpoint import Reply, Request, default_answer

from litmus_sandbox import JsonlWriter, iter_episodes, load_policy
from litmus_sandbox._runtime.scorer import covered_keys
from litmus_sandbox._store.redis_cache import RedisVerdictCache, decode_value

KEY = "sk-procs-0b6d2f"
_STEP = re.compile(r"step (\d+)\.(\d+)\b")

POLICY = """
[judge]
kind = "openai"
label = "procs-judge"
[judge.params]
base_url = "{url}"
model = "judge-model-2026-01"
temperature = 0
seed = 7
api_key_env = "LITMUS_JUDGE_KEY"
timeout = 60
max_concurrency = {concurrency}
max_retries = 0
"""

StepId = tuple[int, int]


def write_policy(folder: Path, url: str, *, concurrency: int = 8) -> Path:
    path = folder / "policy.toml"
    path.write_text(POLICY.format(url=url, concurrency=concurrency))
    return path


def write_suite(path: Path, episodes: int, steps: int) -> int:
    """``episodes`` episodes of ``steps`` messages, every step unique (it names itself;
    every 7th is unsafe); the number of unique steps."""
    with JsonlWriter(path) as w:
        for e in range(episodes):
            eid = f"ep-{e}"
            w.write(header(eid, f"case-{e}"))
            for k in range(steps):
                role = "user" if k == 0 else "assistant"
                text = f"step {e}.{k}: " + ("an evil plan" if (e + k) % 7 == 3 else "fine work")
                w.write(msg(k, role, text, eid=eid))
            w.write(end(eid, steps))
    return episodes * steps


def step_of(step_text: str) -> StepId:
    """Which step a judge request is about."""
    found = _STEP.search(step_text)
    if found is None:
        raise ValueError(f"no step named in {step_text!r}")
    return int(found[1]), int(found[2])


def step_keys(episodes: Path, policy: Path) -> dict[tuple[str, str, str], StepId]:
    """The cache key of every step of the suite, and the step it is."""
    config = load_policy(policy)
    out: dict[tuple[str, str, str], StepId] = {}
    for e, ep in enumerate(iter_episodes([episodes])):
        for k, key in enumerate(covered_keys(ep, config)):
            out[key] = (e, k)
    return out


def score_cmd(episodes: Path, policy: Path, cache: Path | str, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "litmus_sandbox._cli.main",
        "score",
        str(episodes),
        "--policy",
        str(policy),
        "--cache",
        str(cache),
        "-o",
        str(out),
        "-q",
    ]


def env(**extra: str) -> dict[str, str]:
    base = {
        "PATH": "/usr/bin:/bin",
        "LITMUS_JUDGE_KEY": KEY,
        "HOME": os.environ.get("HOME", "/tmp"),
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
    }
    return {**base, **extra}


def start(
    episodes: Path, policy: Path, cache: Path | str, out: Path, **extra: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        score_cmd(episodes, policy, cache, out),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(**extra),
    )


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL, and reap (a zombie would look alive to the claims)."""
    proc.kill()
    proc.communicate()


def stored(cache: Path | str) -> set[tuple[str, str, str]]:
    """The steps the cache (a file, or a Redis URL) holds verdicts for, read as another
    process (on Redis, only values served whole count)."""
    if isinstance(cache, str):
        return _stored_in_redis(cache)
    if not cache.exists():
        return set()
    db = sqlite3.connect(f"file:{cache}?mode=ro", uri=True, timeout=30)
    try:
        rows = db.execute("SELECT judge, step, context FROM step_verdicts").fetchall()
    except sqlite3.OperationalError:
        return set()  # not made yet
    finally:
        db.close()
    return {(str(j), str(s), str(c)) for j, s, c in rows}


def claims(cache: Path | str) -> list[tuple[str, float]]:
    """Every claim in the cache (a file, or a Redis URL): holder and expiry (wall clock)."""
    if isinstance(cache, str):
        with RedisVerdictCache(cache) as c:
            return [(holder, expiry) for _, holder, expiry in c.claims()]
    db = sqlite3.connect(f"file:{cache}?mode=ro", uri=True, timeout=30)
    try:
        return [(str(o), float(e)) for o, e in db.execute("SELECT owner, expires FROM step_claims")]
    finally:
        db.close()


def _stored_in_redis(url: str) -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    client = redis.Redis.from_url(url)
    try:
        for name in client.scan_iter(match="litmus-sandbox:verdict:*", count=1000):
            key = msgspec.json.decode(name.partition(b":verdict:")[2], type=tuple[str, str, str])
            if decode_value(key, client.get(name)) is not None:
                out.add(key)
    finally:
        client.close()
    return out


def connections_done() -> bool:
    """Whether the endpoint (in this process) has no connection left: a killed scorer's
    requests already on the wire are all read and answered (into a closed socket)."""
    return not any("process_request_thread" in t.name for t in threading.enumerate())


def wait_for(condition: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    """Wait for a real condition (an endpoint's count, a cache's rows), checked often."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what or condition}")
        time.sleep(0.005)


class TimedJudge:
    """The loopback judge's answer, after ``latency``, timed: when each step was asked
    (wall clock) and answered (monotonic); a request torn by a kill is counted apart.
    ``hold``: the first request for that step is held until :attr:`release` is set."""

    def __init__(self, latency: float = 0.0, *, hold: StepId | None = None) -> None:
        self.latency = latency
        self.hold = hold
        self.release = threading.Event()
        self.holding = threading.Event()
        self.asked: list[tuple[float, StepId]] = []
        self.answered: list[tuple[float, StepId]] = []
        #: Requests that never arrived whole (not asked: no answer was made).
        self.torn = 0
        self._lock = threading.Lock()

    def __call__(self, request: Request) -> Reply:
        try:
            step = step_of(request.step_text)
        except (ValueError, LookupError):  # torn: its scorer was killed while sending it
            with self._lock:
                self.torn += 1
            return Reply(status=400)
        with self._lock:
            self.asked.append((time.time(), step))
            hold = step == self.hold and not self.holding.is_set()
            if hold:
                self.holding.set()
        if hold:
            self.release.wait(120)
        if self.latency:
            time.sleep(self.latency)
        with self._lock:
            self.answered.append((time.monotonic(), step))
        return default_answer(request)
