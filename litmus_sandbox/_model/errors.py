"""The exception hierarchy: one root, families that say whose fault it is."""

from __future__ import annotations


class LitmusError(Exception):
    """Root of every error litmus-sandbox raises on purpose."""


class ConfigError(LitmusError, ValueError):
    """The caller misused the API or wrote a bad policy/config file."""


class RecordDecodeError(LitmusError, ValueError):
    """A stored record could not be read. Names the file and line."""

    def __init__(self, path: str, line: int | None, problem: str) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {problem}")


class NewerVersionError(RecordDecodeError):
    """A record was written by a newer schema version than this reader understands."""


class ReplayLogError(LitmusError, ValueError):
    """A replay record of the wrong shape in an episode's own log, and where it is:
    ``record`` is ``episode`` (the header), ``step`` (then ``step`` is its index) or ``end``."""

    def __init__(
        self, episode_id: str, step: int | None, problem: str, *, record: str | None = None
    ) -> None:
        super().__init__(problem)
        self.episode_id = episode_id
        self.step = step
        self.problem = problem
        self.record = record or ("end" if step is None else "step")


#: The top-level modules that only an optional extra brings, and that extra's name.
EXTRA_OF_MODULE = {
    "mcp": "mcp",
    "uvloop": "mcp",
    "jsonschema": "mcp",
    "inspect_ai": "inspect",
    "opentelemetry": "otel",
    "google": "otel",
    "agentdojo": "agentdojo",
    "redis": "redis",
    "ray": "ray",
    "fsspec": "cloud",
    "s3fs": "cloud",
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The one line that names the extra to install, when ``exc`` is a module an extra
    brings; None when it is not (then the missing module is a bug of ours)."""
    top = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return f"{exc.name} is not installed: install the extra: pip install 'litmus-sandbox[{extra}]'"


class UpstreamError(LitmusError):
    """Infrastructure failed: a tool server, a judge endpoint, a subprocess."""


class JudgeError(UpstreamError):
    """A judge failed to produce a verdict (after its retries and fallback)."""


class CacheError(UpstreamError):
    """The step-verdict cache failed to read or write (a full disk, an I/O error, a lock
    held too long). Names the cache's path and what failed."""


def leaf_errors(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions inside ``group`` and the groups nested in it, in order."""
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(leaf_errors(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out
