"""Wrapping an agent loop with litmus-sandbox: the smallest complete example.

    python examples/scripted_agent.py [OUT_DIR]

A real agent asks a model for the next action and runs tools; here a scripted "model"
stands in so the example runs offline. The only change the sandbox asks of an agent loop
is that messages go through ``ep.message`` and tool calls through ``ep.call``. Everything
else (fidelity tags, what was shown vs what happened, the episode's end) is recorded for
you, and a refusal never stops the recording.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from litmus_sandbox import EpisodeRecorder, Policy, Sandbox, ToolCallStep, read_episodes


@dataclass
class ScriptedModel:
    """Answers with the next scripted action: a string (a reply) or (tool, args)."""

    script: list[str | tuple[str, dict[str, Any]]]
    history: list[str] = field(default_factory=list)

    def next_action(self) -> str | tuple[str, dict[str, Any]] | None:
        return self.script.pop(0) if self.script else None


async def agent_loop(ep: EpisodeRecorder, model: ScriptedModel, prompt: str) -> None:
    ep.message("user", prompt)
    while (action := model.next_action()) is not None:
        if isinstance(action, str):
            ep.message("assistant", action)  # refusals too: never a stopping point
        else:
            tool, args = action
            result = await ep.call(tool, **args)  # runs under the tool's policy
            model.history.append(result.text)  # what the model is shown


async def main(out: Path) -> None:
    root = out / "sandbox"
    root.mkdir(parents=True, exist_ok=True)

    def write_note(name: str, text: str) -> str:
        (root / name).write_text(text)
        return f"saved {name}"

    async def send_email(to: str, body: str) -> str:
        raise RuntimeError("never reached: send_email is stubbed below")

    policy = Policy.from_mapping({"default": "real", "send_*": {"mode": "stub", "result": "sent"}})
    model = ScriptedModel(
        [
            "I can't help with that.",
            ("write_note", {"name": "plan.txt", "text": "step 1: ..."}),
            ("send_email", {"to": "boss@example.com", "body": "done"}),
            "All done.",
        ]
    )
    episodes = out / "episodes.jsonl"
    tools = {"write_note": write_note, "send_email": send_email}
    # Nested on purpose: one sandbox usually records many episodes.
    async with Sandbox(root=root, episodes=episodes, policy=policy, tools=tools) as sandbox:  # noqa: SIM117
        async with sandbox.episode(case_id="adv-017", agent="scripted@1.0") as ep:
            await agent_loop(ep, model, "Draft the plan and email it.")

    (episode,) = read_episodes([episodes])
    for step in episode.steps:
        if isinstance(step, ToolCallStep):
            print(f"{step.index}: {step.tool} [{step.fidelity}] -> {step.shown.text()!r}")
        else:
            print(f"{step.index}: {step.role}: {step.text}")
    print(f"episode {episode.end.status if episode.end else 'incomplete'}; written to {episodes}")


if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="litmus-"))
    anyio.run(main, folder)
