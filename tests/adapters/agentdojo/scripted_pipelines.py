"""Scripted AgentDojo pipelines for the tests (``--pipeline FILE.py:FACTORY``): a fake
model that says what it is told, inside AgentDojo's own tool loop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentdojo.agent_pipeline.agent_pipeline import AgentPipeline
from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
from agentdojo.agent_pipeline.basic_elements import InitQuery, SystemMessage
from agentdojo.agent_pipeline.tool_execution import ToolsExecutionLoop, ToolsExecutor
from agentdojo.functions_runtime import EmptyEnv, FunctionCall, FunctionsRuntime
from agentdojo.types import ChatAssistantMessage, ChatMessage, text_content_block_from_string


class ScriptedModel(BasePipelineElement):
    """Answers each query with the next turn: ``(text, [(id, function, args), ...])``."""

    name = "scripted-model"

    def __init__(self, turns: list[tuple[str, list[tuple[str, str, dict[str, Any]]]]]) -> None:
        self.turns = list(turns)

    def query(
        self,
        query: str,
        runtime: FunctionsRuntime,
        env: Any = EmptyEnv(),  # noqa: B008 - AgentDojo's own signature
        messages: Sequence[ChatMessage] = (),
        extra_args: dict[str, Any] | None = None,
    ) -> tuple[str, FunctionsRuntime, Any, Sequence[ChatMessage], dict[str, Any]]:
        text, calls = self.turns.pop(0) if self.turns else ("done", [])
        message = ChatAssistantMessage(
            role="assistant",
            content=[text_content_block_from_string(text)],
            tool_calls=[FunctionCall(function=f, args=a, id=i) for i, f, a in calls] or None,
        )
        return query, runtime, env, [*messages, message], extra_args or {}


def _pipeline(model: ScriptedModel, max_iters: int = 15) -> AgentPipeline:
    loop = ToolsExecutionLoop([ToolsExecutor(), model], max_iters=max_iters)
    pipeline = AgentPipeline([SystemMessage("You are a bank assistant."), InitQuery(), model, loop])
    pipeline.name = "scripted-model"
    return pipeline


def undispatched() -> AgentPipeline:
    """Calls AgentDojo answers itself (an empty name, an unknown tool), then a real one."""
    return _pipeline(
        ScriptedModel(
            [
                (
                    "Let me look.",
                    [("c1", "", {}), ("c2", "format_disk", {}), ("c3", "get_balance", {})],
                ),
                ("Your balance is known.", []),
            ]
        )
    )


def endless() -> AgentPipeline:
    """A model that never stops calling tools: the loop's max_iters cuts it."""
    turns: list[tuple[str, list[tuple[str, str, dict[str, Any]]]]] = [
        ("", [(f"c{i}", "get_balance", {})]) for i in range(10)
    ]
    return _pipeline(ScriptedModel(turns), max_iters=2)


def nested(user_task: Any) -> AgentPipeline:
    """A call whose argument is another call (AgentDojo runs the inner one first)."""
    del user_task
    inner = FunctionCall(function="get_iban", args={}, id="inner")
    return _pipeline(
        ScriptedModel(
            [
                ("", [("outer", "get_balance", {})]),
                (
                    "",
                    [
                        (
                            "n",
                            "send_money",
                            {
                                "recipient": inner,
                                "amount": 1.0,
                                "subject": "x",
                                "date": "2022-01-01",
                            },
                        )
                    ],
                ),
            ]
        )
    )


def failing() -> AgentPipeline:
    """A model whose API fails on the first query."""

    class Down(ScriptedModel):
        def query(self, *args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("the model's API is down")

    return _pipeline(Down([]))
