"""Task-augmented calls (2025-11-25), for the relay core (a base of ``Relay``).

Theory of operation: a ``tools/call`` with ``params.task`` may be answered with a task
(``CreateTaskResult``) instead of a result. The client gets the task at once; the call
waits in state ``TASK`` (``_states.py``), and its step is recorded when the result comes:
the server's answer to the client's ``tasks/result`` for that task, relayed once
recorded. The step's ``meta["mcp"]["task"]`` links the task id and says the result came
later. A call the proxy answers itself (stub, deny, replay) is answered in the shape the
client asked for: a completed task of the proxy's own, whose ``tasks/get`` and
``tasks/result`` the proxy answers (the result is what the step records as shown).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from .._jsonrpc import Message
from ._actions import Action, FinishCall, ToClient
from ._guard import INVALID_PARAMS, Guard
from ._states import Event, Pending, advance

#: Links a message to its task: ``_meta[RELATED_TASK_META_KEY] = {"taskId": ...}``.
RELATED_TASK_META_KEY = "io.modelcontextprotocol/related-task"

_decode = msgspec.json.Decoder()
_encode = msgspec.json.Encoder()


class Tasks(Guard):
    """The task handling of a :class:`~._core.Relay`."""

    _tasks: dict[str, Pending]
    _own_tasks: dict[str, dict[str, Any]]

    def _task_created(self, pending: Pending, task_id: str, line: bytes) -> list[Action]:
        """The server answered a call with a task: the client gets it now; the step waits
        for the result the client fetches with ``tasks/result``."""
        assert pending.call is not None
        advance(pending, Event.TASK)
        pending.deadline = None  # a task runs as long as it runs (its ttl is the server's)
        self._tasks[task_id] = pending
        pending.call.extra_meta["task"] = {"task_id": task_id}
        return [ToClient(line)]

    def _task_result(
        self, call: Pending, request: Pending, line: bytes, body: dict[str, Any]
    ) -> list[Action]:
        """The answer to ``tasks/result`` is the task's call's result: recorded on its
        step (linked to the task, the result said to have come later), then relayed."""
        assert call.call is not None
        advance(call, Event.ANSWER)
        task = call.call.extra_meta.setdefault("task", {})
        task.update(result_request_id=request.id, result_later=True)
        return [FinishCall(call, "answered", raw=line, body=body)]

    def _own_task(self, request_id: Any, task_id: str, reply: bytes) -> bytes:
        """A ``CreateTaskResult`` for a call the proxy answered itself; its result is kept
        for the client's ``tasks/result``."""
        self._own_tasks[task_id], answer = own_task(request_id, task_id, reply)
        return answer + b"\n"

    def _own_task_answer(self, request_id: Any, method: str, task_id: str) -> ToClient:
        """Answer ``tasks/get``, ``tasks/result`` or ``tasks/cancel`` about the proxy's own
        task (it is done: its result is the stand-in the step records)."""
        answer = own_task_answer(request_id, method, self._own_tasks[task_id])
        if answer is None:
            return self._error(request_id, INVALID_PARAMS, f"{method} of the proxy's own task")
        return ToClient(answer + b"\n")


def own_task(request_id: Any, task_id: str, reply: bytes) -> tuple[dict[str, Any], bytes]:
    """The proxy's own task for a call it answered itself with ``reply``: the task kept
    (its record and result), and the ``CreateTaskResult`` answering the call."""
    result = _decode.decode(reply).get("result", {})
    at = datetime.now(UTC).isoformat()
    task: dict[str, Any] = {"taskId": task_id, "status": "completed", "ttl": None}
    task.update(createdAt=at, lastUpdatedAt=at)
    meta = {**result.get("_meta", {}), RELATED_TASK_META_KEY: {"taskId": task_id}}
    answer = {"jsonrpc": "2.0", "id": request_id, "result": {"task": task}}
    return {"task": task, "result": {**result, "_meta": meta}}, _encode.encode(answer)


def own_task_answer(request_id: Any, method: str, own: dict[str, Any]) -> bytes | None:
    """The answer to ``tasks/get``, ``tasks/result`` or ``tasks/cancel`` about the
    proxy's own task ``own`` (None for another method)."""
    if method not in ("tasks/get", "tasks/result", "tasks/cancel"):
        return None
    result = own["result"] if method == "tasks/result" else own["task"]
    return _encode.encode({"jsonrpc": "2.0", "id": request_id, "result": result})


def task_id_of(msg: Message) -> str | None:
    """The ``taskId`` a ``tasks/*`` request names."""
    if msg.params is None or not str(msg.method).startswith("tasks/"):
        return None
    task_id = msg.params.get("taskId")
    return task_id if isinstance(task_id, str) else None


def created_task(body: dict[str, Any]) -> str | None:
    """The task id of a ``CreateTaskResult`` answer (None for any other answer)."""
    result = body.get("result")
    task = result.get("task") if isinstance(result, dict) and "content" not in result else None
    task_id = task.get("taskId") if isinstance(task, dict) else None
    return task_id if isinstance(task_id, str) else None
