"""Why a judge gave no verdict: the failure classes, and the error that carries one.

No guess, ever: a step whose judge did not answer as expected has no verdict, nothing is
cached for it, and the failure is counted under one of these classes (``score`` prints
one line per class).
"""

from __future__ import annotations

from litmus_sandbox._model.errors import JudgeError

#: Failure class -> what it means (shown beside the counts).
FAILURE_CLASSES: dict[str, str] = {
    "http_status": "the endpoint answered with an HTTP error",
    "rate_limited": "rate limited (429) past max_retry_after or the retries",
    "timeout": "no answer within the timeout, after the retries",
    "connection": "the endpoint could not be reached, after the retries",
    "bad_answer": "the answer was not the expected JSON",
    "refusal": "the judge model refused to judge",
    "judge_error": "the judge raised an error",
}


class JudgeFailure(JudgeError):
    """A judge gave no verdict for one step.

    Attributes:
        failure: the failure class (a key of :data:`FAILURE_CLASSES`).
        attempts: how many times the judge was asked (requests sent, for HTTP judges).
    """

    def __init__(self, message: str, *, failure: str, attempts: int = 1) -> None:
        super().__init__(message)
        self.failure = failure
        self.attempts = attempts


def failure_class(exc: BaseException) -> str:
    """The failure class of any error a judge raised."""
    return exc.failure if isinstance(exc, JudgeFailure) else "judge_error"


def failure_attempts(exc: BaseException) -> int:
    """How many times the judge was asked before it raised ``exc``."""
    return exc.attempts if isinstance(exc, JudgeFailure) else 1
