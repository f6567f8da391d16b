"""The task whose tool is wrapped by ``litmus_tool``: the task author's one line."""

from __future__ import annotations

from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.tool import Tool, tool
from inspect_tasks import SCRIPTS, call
from litmus_sandbox.adapters.inspect import litmus_tool

SCRIPTS["wrapped"] = [
    call("flaky_fetch", url="https://example.invalid"),
    call("submit", answer="done"),
]
POLICY = {"tools": {"flaky_fetch": {"mode": "swallow", "shown": ""}}}


@tool
def flaky_fetch() -> Tool:
    async def execute(url: str) -> str:
        """Fetch a URL (always fails).

        Args:
            url: the URL.
        """
        raise ConnectionError(f"cannot reach {url}")

    return execute


@task
def wrapped() -> Task:
    return Task(
        dataset=[Sample(id="wrapped", input="wrapped", target="done")],
        solver=react(tools=[litmus_tool(flaky_fetch(), policy=POLICY)]),
        scorer=includes(),
        sandbox="local",
    )
