"""Run every test task once, as a user would: ``python run_inspect.py LOG_DIR POLICY``.

Run in its own process with ``$LITMUS_SANDBOX_EPISODES`` set, so the recorder hooks, the
approver and the sandbox provider come in through the entry point alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from inspect_ai import eval
from inspect_ai.model import get_model
from inspect_tasks import (
    approvals,
    empty_results,
    limited,
    refusals,
    retried,
    sandbox_write,
    scripted,
)

if __name__ == "__main__":
    log_dir, policy = sys.argv[1], sys.argv[2]
    assert "litmus_sandbox" not in sys.modules, "the task module imported litmus_sandbox"
    from inspect_wrapped import wrapped

    tasks = [
        refusals(),
        retried(),
        limited(),
        approvals(policy),
        empty_results(),
        sandbox_write(),
        wrapped(),
    ]
    model = get_model("mockllm/model", custom_outputs=scripted())
    logs = eval(tasks, model=model, log_dir=log_dir, display="none", sandbox="litmus", max_tasks=7)
    failed = [log.eval.task for log in logs if log.status != "success"]
    print("failed:", failed, [str(log.error)[:300] for log in logs if log.error])
    sys.exit(1 if failed else 0)
