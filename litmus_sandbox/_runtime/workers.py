"""Daemon threads for sync tools: a tool that never returns never holds the process.

Theory of operation
-------------------
anyio's worker threads are not daemon threads on asyncio: a sync tool abandoned at its
time limit that never returns would keep the interpreter from exiting (it joins every
other thread at exit), long after its episode ended and its sandbox closed. Sync tools run
here instead (:func:`run_sync`): on daemon threads, kept idle for a while for the next
call, each running one call at a time in a copy of the caller's context (the call's audit
evidence, its egress call id), its result handed back to the event loop through anyio's
loop token. A call cancelled meanwhile (its time limit) abandons its thread: the tool runs
on, and what it does later is the ledger's business (``ledger.py``); when the process
exits, the interpreter does not wait for it.
"""

from __future__ import annotations

import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

__all__ = ["run_sync"]

#: An idle thread ends after this many seconds without a call.
IDLE_S = 10.0

_Job = Callable[[], None]
_idle: list[_Worker] = []
_lock = threading.Lock()


class _Worker(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="litmus sync tool", daemon=True)
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            try:
                job = self.jobs.get(timeout=IDLE_S)
            except queue.Empty:
                with _lock:
                    if self in _idle:  # not handed a job meanwhile: end
                        _idle.remove(self)
                        return
                continue  # a job is on its way
            job()
            del job
            with _lock:
                _idle.append(self)


def _submit(job: _Job) -> None:
    with _lock:
        worker = _idle.pop() if _idle else None
    if worker is None:
        worker = _Worker()
        worker.jobs.put(job)
        worker.start()
    else:
        worker.jobs.put(job)


async def run_sync(fn: Callable[[], Any]) -> Any:
    """``fn()`` on a daemon thread, in a copy of this context; its value, or its exception.

    Cancelling the caller abandons the thread (``fn`` runs on; its end is not awaited).
    """
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    outcome: list[tuple[bool, Any]] = []
    context = contextvars.copy_context()

    def job() -> None:
        try:
            outcome.append((True, context.run(fn)))
        except BaseException as exc:  # handed to the caller, whatever it is
            outcome.append((False, exc))
        # The loop may have gone (the call abandoned, its run ended): nobody to tell.
        with contextlib.suppress(Exception):
            anyio.from_thread.run_sync(done.set, token=token)

    _submit(job)
    await done.wait()
    ok, value = outcome[0]
    if ok:
        return value
    raise value
