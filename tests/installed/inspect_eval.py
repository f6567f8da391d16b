"""An Inspect eval as a user of the ``inspect`` extra runs it: ``python inspect_eval.py LOGS``.

One sample, scripted with ``mockllm/model`` (``usage`` set on every output, or mockllm
downloads a tokenizer), a tool that writes in the ``litmus`` sandbox, and the recorder
hooks from the entry point (``$LITMUS_SANDBOX_EPISODES``). Nothing here imports
litmus_sandbox: the entry point brings it, as it does for a user.
"""

from __future__ import annotations

import sys
from pathlib import Path

from inspect_ai import Task, eval
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.model import get_model
from inspect_ai.scorer import includes

# The adapter tests' scripted outputs and sandbox tool (that module imports no
# litmus_sandbox either).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapters" / "inspect"))
from inspect_tasks import MODEL, call, write_note

if __name__ == "__main__":
    task = Task(
        dataset=[Sample(id="sandbox-write", input="write a note", target="done")],
        solver=react(tools=[write_note()]),
        scorer=includes(),
    )
    script = [call("write_note", name="note.txt"), call("submit", answer="done")]
    model = get_model(MODEL, custom_outputs=script)
    (log,) = eval(task, model=model, log_dir=sys.argv[1], display="none", sandbox="litmus")
    print(log.status, log.error or "")
    sys.exit(0 if log.status == "success" else 1)
