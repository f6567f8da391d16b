"""The ``python`` judge: a function named in the policy file judges each step.

``entry = "module:function"`` is imported from the path, else found beside the policy
file or in the working directory (as ``python -m`` would find it), or loaded from
``path`` (relative to the policy file). The function takes ``(step, context)``, and
``params`` and ``secrets`` if it names them, and returns a bool (safe), a
:class:`StepJudgment`, or a mapping with ``safe`` and optionally ``evidence`` and
``reason``. ``secrets`` (``[judge.secrets]``: name -> environment variable) are read from
the environment when the judge first judges; only their names are written and
fingerprinted, and their values are scrubbed from what the judge says and raises.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from litmus_sandbox._core.scoring import StepJudgment, fingerprint
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import Step
from litmus_sandbox.judges._failure import JudgeFailure
from litmus_sandbox.judges._secrets import redact, scrub


class PythonJudge:
    """A judge implemented by a Python function ``fn(step, context)``.

    Its fingerprint covers the entry point, the label, the params (secrets redacted) and a
    hash of the module's source, so editing the judge's code changes provenance.

    Raises:
        ConfigError: the entry is malformed, or its module or function cannot be loaded.
    """

    kind = "python"

    def __init__(
        self,
        entry: str,
        *,
        label: str | None = None,
        path: str | None = None,
        params: Mapping[str, Any] | None = None,
        base_dir: str | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> None:
        self.entry = entry
        self.params = dict(params or {})
        #: Secret name -> the environment variable that holds it.
        self.secrets = dict(secrets or {})
        self._secret_values: dict[str, str] | None = None
        self._fn, source = _load_entry(entry, path, base_dir)
        self.code_sha256 = hashlib.sha256(source).hexdigest()
        self.path = path
        #: Where a relative ``path`` was found (recorded beside the policy, not fingerprinted).
        self.base_dir = os.path.abspath(base_dir or ".")
        self._label = label or entry
        self._description = {
            "kind": self.kind,
            "label": self._label,
            "entry": entry,
            "path": path,
            "code_sha256": self.code_sha256,
            "params": redact(self.params),
        }
        if self.secrets:
            self._description["secrets"] = dict(self.secrets)  # the variables' names
        # Secrets never change a verdict: the fingerprint is the redacted description's, so
        # a rotated API key keeps the judge (and its cached step verdicts) the same.
        self._fingerprint = fingerprint(self._description)
        wanted = inspect.signature(self._fn).parameters
        self._wants_params = "params" in wanted
        self._wants_secrets = "secrets" in wanted

    @property
    def label(self) -> str:
        return self._label

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def describe(self) -> dict[str, Any]:
        return dict(self._description)

    def secret_values(self) -> dict[str, str]:
        """The ``[judge.secrets]``, read from the environment (once).

        Raises:
            ConfigError: a variable is not set (or empty).
        """
        if self._secret_values is None:
            values: dict[str, str] = {}
            for name, variable in self.secrets.items():
                value = os.environ.get(variable)
                if not value:
                    raise ConfigError(
                        f"judge {self._label!r}: environment variable {variable} "
                        f"(secret {name!r}) is not set"
                    )
                values[name] = value
            self._secret_values = values
        return self._secret_values

    def judge_step(self, step: Step, context: Sequence[Step]) -> StepJudgment:
        kwargs: dict[str, Any] = {}
        if self._wants_params:
            kwargs["params"] = self.params
        if self._wants_secrets:
            kwargs["secrets"] = self.secret_values()
        values = list(self._secret_values.values()) if self._secret_values else []
        try:
            raw = self._fn(step, context, **kwargs)
        except SystemExit as exc:
            # sys.exit() in a judge is the judge failing, never the command's exit code
            # (a silent exit 0 would pass a gate; exit 1 would read as a regression).
            raise JudgeFailure(
                f"the judge called sys.exit({exc.code!r})", failure="judge_error"
            ) from None
        except Exception as exc:
            said = f"{type(exc).__name__}: {exc}"
            if values and scrub(said, values) != said:
                # Its message quotes a secret: shown only scrubbed (the class names it).
                raise JudgeFailure(scrub(said, values), failure="judge_error") from None
            raise
        judgment = self._judgment(raw)
        return _scrubbed(judgment, values) if values else judgment

    def _judgment(self, raw: Any) -> StepJudgment:
        if isinstance(raw, StepJudgment):
            return raw
        if isinstance(raw, bool):
            return StepJudgment(safe=raw)
        if isinstance(raw, Mapping):
            try:
                return msgspec.convert(dict(raw), StepJudgment)
            except msgspec.ValidationError as exc:
                raise TypeError(f"judge {self.entry} returned an invalid mapping: {exc}") from None
        raise TypeError(
            f"judge {self.entry} returned {type(raw).__name__}; expected bool, mapping or StepJudgment"
        )


def _scrubbed(judgment: StepJudgment, secrets: list[str]) -> StepJudgment:
    """``judgment`` with every secret value scrubbed from its text."""
    reason = judgment.reason
    if reason is None or scrub(reason, secrets) == reason:
        return judgment
    return msgspec.structs.replace(judgment, reason=scrub(reason, secrets))


def _load_entry(
    entry: str, path: str | None, base_dir: str | None
) -> tuple[Callable[..., Any], bytes]:
    module_name, sep, attr = entry.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"judge entry {entry!r} must look like 'module:function'")
    try:
        if path is not None:
            file = Path(base_dir or ".", path)
            spec = importlib.util.spec_from_file_location(f"litmus_judge_{module_name}", file)
            if spec is None or spec.loader is None or not file.is_file():
                raise ConfigError(f"judge path {str(file)!r} is not a Python file")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = _import(module_name, base_dir)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"cannot load judge {entry!r}: {type(exc).__name__}: {exc}") from None
    fn: Any = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise ConfigError(f"judge {entry!r}: {module_name} has no attribute {attr!r}")
    if not callable(fn):
        raise ConfigError(f"judge {entry!r} is not callable")
    try:
        source = Path(inspect.getfile(module)).read_bytes()
    except (TypeError, OSError):
        source = entry.encode()
    return fn, source


def _import(module_name: str, base_dir: str | None) -> ModuleType:
    """Import ``module_name``; a top-level module not on the path is also looked for
    beside the policy file and in the working directory (as ``python -m`` would find it),
    and that directory is then added (at the end) to ``sys.path`` for the module's own
    imports."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.partition(".")[0]
        if exc.name != top:
            raise  # found, but something it imports is missing: say that
        for folder in dict.fromkeys(os.path.abspath(d) for d in (base_dir or ".", ".")):
            if Path(folder, f"{top}.py").is_file() or Path(folder, top, "__init__.py").is_file():
                sys.path.append(folder)  # last: never shadows an installed module
                return importlib.import_module(module_name)
        raise
