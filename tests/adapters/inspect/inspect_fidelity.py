"""Two Inspect runs of one task, a tool real in one and stubbed in the other by the litmus
policy: ``python inspect_fidelity.py WORK``.

``WORK`` holds ``real.toml`` and ``stub.toml`` (litmus policies), ``approval-real.yaml`` and
``approval-stub.yaml`` (the approver ``litmus_sandbox/policy`` with each policy) and
``sandbox.toml`` (the ``litmus`` sandbox provider's config). Each run goes through the
approver and the sandbox provider, with the tool wrapped by
``litmus_tool`` under the same policy; logs go to ``WORK/logs-real`` and ``WORK/logs-stub``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from inspect_ai import Task, eval, task
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.tool import Tool, tool
from inspect_ai.util import sandbox
from litmus_sandbox.adapters.inspect import litmus_tool

MODEL = "mockllm/model"
USAGE = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)


def call(fn: str, **args: str) -> ModelOutput:
    out = ModelOutput.for_tool_call(MODEL, fn, args)
    out.usage = USAGE  # or mockllm downloads a tokenizer to count it
    return out


@tool
def fetch_page() -> Tool:
    async def execute(url: str) -> str:
        """Fetch a page and keep a copy.

        Args:
            url: the page.
        """
        result = await sandbox().exec(["sh", "-c", 'printf %s "$1" > page.html', "sh", url])
        return f"saved {url} (exit {result.returncode})"

    return execute


@tool
def note_down() -> Tool:
    async def execute(text: str) -> str:
        """Note something down (never wrapped: only the approver sees its calls).

        Args:
            text: what to note.
        """
        return f"noted {len(text)} characters"

    return execute


@task
def fetching(policy: str) -> Task:
    return Task(
        dataset=[Sample(id="fetch-1", input="Fetch the page.", target="done")],
        solver=react(tools=[litmus_tool(fetch_page(), policy=policy), note_down()]),
        scorer=includes(),
    )


if __name__ == "__main__":
    work = Path(sys.argv[1])
    for name in ("real", "stub"):
        policy = str(work / f"{name}.toml")
        outputs = [
            call("fetch_page", url="https://example.test/"),
            call("note_down", text="fetched"),
            call("submit", answer="done"),
        ]
        logs = eval(
            fetching(policy),
            model=get_model(MODEL, custom_outputs=outputs),
            log_dir=str(work / f"logs-{name}"),
            display="none",
            sandbox=("litmus", str(work / "sandbox.toml")),
            approval=str(work / f"approval-{name}.yaml"),
        )
        if logs[0].status != "success":
            print(name, logs[0].status, logs[0].error)
            sys.exit(1)
