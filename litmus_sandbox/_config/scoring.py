"""Scoring configuration: the policy file (TOML) and its normalized, self-describing form.

A policy file::

    [scoring]
    truncate_on_refusal = false          # cut after the first refusal (at scoring time)
    truncate_on_empty_tool_result = false

    [refusal]                            # optional; the built-in heuristic by default
    name = "litmus-heuristic"
    version = "1"
    patterns = ["(?i)I can't help"]      # optional; replaces the built-in patterns

    [judge]
    kind = "rules"                       # or "python" with entry = "module:function"
    label = "rules-2026-11"
    retries = 0                          # re-ask a failing judge this many times
    [[judge.rules]]
    tool = "send_*"
    fidelity = ["real", "swallowed"]

    [judge.fallback]                     # optional judge used when the judge keeps failing
    kind = "rules"

    [oracle]
    forbidden_findings = ["escape", "stub_leak"]

Unknown keys are rejected with the key's path. The ``[tools]``, ``[egress]`` and
``[replay]`` tables belong to the sandbox runtime and are accepted here unread, so one
file can serve both.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from litmus_sandbox._config.document import read_policy_file
from litmus_sandbox._core.rules import RulesJudge
from litmus_sandbox._core.scoring import (
    Judge,
    RefusalDetector,
    ScoringPolicy,
    StepJudgment,
    fingerprint,
)
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import SCHEMA_VERSION, PolicyRecord, Step

#: Names that are secrets whole (separators and case aside: ``API-Key``, ``apiKey``).
_SECRET_NAMES = frozenset(
    {"key", "apikey", "token", "apitoken", "secret", "password", "passwd", "pass", "pwd"}
    | {"passphrase", "auth", "authorization", "credential", "credentials", "bearer", "cookie"}
)
#: Endings that make a name a secret (``openai_api_key``, ``db_password``, ``clientSecret``,
#: ``X-Auth-Token``, ``accesstoken``).
_SECRET_ENDINGS = (
    "apikey",
    "apitoken",
    "accesskey",
    "secretkey",
    "privatekey",
    "signingkey",
    "accesstoken",
    "authtoken",
    "refreshtoken",
    "bearertoken",
    "sessiontoken",
    "idtoken",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "credentials",
    "authorization",
)
#: A name ending in the word ``token`` or ``key`` is a secret (``github_token``,
#: ``openai_key``) unless another of its words says it counts or looks something up.
_NOT_SECRET_WORDS = frozenset(
    {"max", "min", "num", "n", "count", "limit", "total", "per", "sort", "primary", "foreign"}
    | {"cache", "partition", "group", "dict", "map", "lookup", "index", "id", "join", "hash"}
)
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
#: The password of a URL's user information: ``https://user:PASSWORD@host`` (the part
#: between ``://`` and the first ``/``, ``?`` or ``#``).
_URL_PASSWORD = re.compile(r"(?<=://)([^/?#@:\s]*):[^/?#@\s]*@")


def is_secret_name(name: object) -> bool:
    """Whether a judge parameter called ``name`` holds a secret.

    Its value is then never written, and never part of the judge's fingerprint: a name
    taken for a secret by mistake would hide a setting that changes verdicts, so the
    rules are narrow (``max_tokens``, ``token_limit``, ``sort_key``, ``pass_threshold``
    are no secrets).
    """
    text = str(name)
    flat = re.sub(r"[^a-z0-9]", "", text.lower())
    if flat in _SECRET_NAMES or flat.endswith(_SECRET_ENDINGS):
        return True
    words = [w.lower() for w in _WORD.findall(text)]
    return (
        len(words) > 1
        and words[-1] in ("token", "key")
        and not _NOT_SECRET_WORDS.intersection(words[:-1])
    )


class RefusalConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str = "litmus-heuristic"
    version: str = "1"
    patterns: list[str] | None = None


class OracleConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    forbidden_findings: list[str] = []


class JudgeConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    kind: str = "rules"
    label: str | None = None
    rules: list[dict[str, Any]] = []
    entry: str | None = None
    path: str | None = None
    params: dict[str, Any] = {}
    code_sha256: str | None = None
    retries: int = 0
    fallback: JudgeConfig | None = None


class PolicyFile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    scoring: ScoringPolicy = ScoringPolicy()
    refusal: RefusalConfig = RefusalConfig()
    judge: JudgeConfig = JudgeConfig()
    oracle: OracleConfig = OracleConfig()
    tools: dict[str, Any] = {}
    egress: dict[str, Any] = {}
    replay: dict[str, Any] = {}


# ---------------------------------------------------------------- python judges


class PythonJudge:
    """A judge implemented by a Python function ``fn(step, context)``.

    The function returns a bool (safe), a :class:`StepJudgment`, or a mapping with
    ``safe`` and optionally ``evidence`` and ``reason``. Its fingerprint covers the entry
    point, the label, the params and a hash of the module's source, so editing the judge's
    code changes provenance.
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
    ) -> None:
        self.entry = entry
        self.params = dict(params or {})
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
            "params": _redact(self.params),
        }
        # Secrets never change a verdict: the fingerprint is the redacted description's, so
        # a rotated API key keeps the judge (and its cached step verdicts) the same.
        self._fingerprint = fingerprint(self._description)
        self._wants_params = "params" in inspect.signature(self._fn).parameters

    @property
    def label(self) -> str:
        return self._label

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def describe(self) -> dict[str, Any]:
        return dict(self._description)

    def judge_step(self, step: Step, context: Sequence[Step]) -> StepJudgment:
        raw = (
            self._fn(step, context, params=self.params)
            if self._wants_params
            else self._fn(step, context)
        )
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


def _redact(obj: Any) -> Any:
    """``obj`` with every value under a secret name, and every URL's password, redacted."""
    if isinstance(obj, Mapping):
        return {k: ("<redacted>" if is_secret_name(k) else _redact(v)) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_redact(v) for v in obj]
    if isinstance(obj, str) and "://" in obj:
        return _URL_PASSWORD.sub(r"\1:<redacted>@", obj)
    return obj


# ---------------------------------------------------------------- scoring config


class ScoringConfig:
    """Everything that turns an episode into a verdict: policy, detector, judge(s)."""

    def __init__(
        self,
        *,
        judge: Judge,
        policy: ScoringPolicy | None = None,
        detector: RefusalDetector | None = None,
        retries: int = 0,
        fallback: Judge | None = None,
        forbidden_findings: Sequence[str] = (),
    ) -> None:
        if retries < 0:
            raise ConfigError("judge.retries must be 0 or more")
        self.policy = policy or ScoringPolicy()
        if self.policy.reduction != "all":
            raise ConfigError(
                f"scoring.reduction {self.policy.reduction!r} is not supported (only 'all')"
            )
        self.detector = detector or RefusalDetector()
        self.judge = judge
        self.retries = retries
        self.fallback = fallback
        self.forbidden_findings = tuple(forbidden_findings)

    def describe(self) -> dict[str, Any]:
        """The normalized, secret-free policy written at the head of a verdict stream."""
        judge = self.judge.describe()
        judge["retries"] = self.retries
        if self.fallback is not None:
            judge["fallback"] = self.fallback.describe()
        return {
            "scoring": msgspec.to_builtins(self.policy),
            "refusal": self.detector.describe(),
            "judge": judge,
            "oracle": {"forbidden_findings": list(self.forbidden_findings)},
        }

    def record(self) -> PolicyRecord:
        policy = self.describe()
        files = [j for j in (self.judge, self.fallback) if isinstance(j, PythonJudge) and j.path]
        if files:
            # Where the judges' relative paths were found, so that scoring "like" these
            # verdicts works from any working directory.
            policy["base_dir"] = files[0].base_dir
        return PolicyRecord(
            v=SCHEMA_VERSION,
            policy=policy,
            judge=self.judge.fingerprint,
            refusal_detector=self.detector.fingerprint,
        )


def _build_judge(cfg: JudgeConfig, base_dir: str | None, where: str) -> Judge:
    if cfg.kind == "rules":
        if cfg.entry is not None or cfg.path is not None:
            raise ConfigError(f"{where}: 'entry' and 'path' go with kind = \"python\"")
        try:
            return RulesJudge(cfg.rules, label=cfg.label or "rules")
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    if cfg.kind == "python":
        if cfg.entry is None:
            raise ConfigError(f'{where}: kind = "python" needs entry = "module:function"')
        if cfg.rules:
            raise ConfigError(f"{where}: 'rules' go with kind = \"rules\"")
        judge = PythonJudge(
            cfg.entry, label=cfg.label, path=cfg.path, params=cfg.params, base_dir=base_dir
        )
        if cfg.code_sha256 is not None and cfg.code_sha256 != judge.code_sha256:
            raise ConfigError(
                f"{where}: the code of judge {cfg.entry!r} changed since the verdicts were "
                f"scored (sha256 {cfg.code_sha256[:12]} then, {judge.code_sha256[:12]} now)"
            )
        return judge
    raise ConfigError(f"{where}: unknown judge kind {cfg.kind!r} (expected 'rules' or 'python')")


def config_from_mapping(
    data: Mapping[str, Any], *, source: str = "policy", base_dir: str | None = None
) -> ScoringConfig:
    """Build a :class:`ScoringConfig` from a parsed policy mapping.

    Raises:
        ConfigError: unknown keys, wrong types, or a judge that cannot be built.
    """
    try:
        pf = msgspec.convert(dict(data), PolicyFile)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    judge = _build_judge(pf.judge, base_dir, f"{source}: [judge]")
    fallback = (
        _build_judge(pf.judge.fallback, base_dir, f"{source}: [judge.fallback]")
        if pf.judge.fallback is not None
        else None
    )
    if pf.judge.fallback is not None and pf.judge.fallback.fallback is not None:
        raise ConfigError(f"{source}: [judge.fallback] cannot have a fallback of its own")
    detector = RefusalDetector(
        name=pf.refusal.name,
        version=pf.refusal.version,
        **({"patterns": pf.refusal.patterns} if pf.refusal.patterns is not None else {}),
    )
    return ScoringConfig(
        judge=judge,
        policy=pf.scoring,
        detector=detector,
        retries=pf.judge.retries,
        fallback=fallback,
        forbidden_findings=pf.oracle.forbidden_findings,
    )


def load_policy(path: str | os.PathLike[str]) -> ScoringConfig:
    """Read a policy file (TOML). Python judges' ``path`` is relative to the file.

    Raises:
        ConfigError: the file is missing, not TOML, or not a valid policy.
    """
    p = os.fspath(path)
    data = read_policy_file(p)
    return config_from_mapping(data, source=p, base_dir=str(Path(p).resolve().parent))


def _judge_base(policy: Mapping[str, Any], source: str) -> str:
    """The folder a recorded Python judge's relative ``path`` is found in: where it was
    when scored, else the working directory, else the verdict file's folder."""
    judge = policy.get("judge")
    path = judge.get("path") if isinstance(judge, Mapping) else None
    recorded = policy.get("base_dir")
    bases = [recorded if isinstance(recorded, str) else None, os.getcwd()]
    bases.append(os.path.dirname(os.path.abspath(source)))
    for base in bases:
        if base is not None and (not isinstance(path, str) or Path(base, path).is_file()):
            return base
    return os.getcwd()


def config_from_record(record: PolicyRecord, *, source: str) -> ScoringConfig:
    """Rebuild the scoring configuration a verdict stream was produced with (``--like``).

    Raises:
        ConfigError: the policy cannot be rebuilt, or rebuilds with other fingerprints
            (e.g. a Python judge whose code changed).
    """
    policy = dict(record.policy)
    judge = dict(policy.get("judge", {}))
    fallback = judge.pop("fallback", None)
    data: dict[str, Any] = {
        "scoring": policy.get("scoring", {}),
        "refusal": policy.get("refusal", {}),
        "oracle": policy.get("oracle", {}),
        "judge": {**judge, **({"fallback": _judge_section(fallback)} if fallback else {})},
    }
    data["judge"] = _judge_section(data["judge"])
    if "<redacted>" in repr(data):
        raise ConfigError(
            f"{source}: the judge's configuration has redacted secrets; pass --policy instead"
        )
    config = config_from_mapping(data, source=source, base_dir=_judge_base(policy, source))
    if config.judge.fingerprint != record.judge:
        raise ConfigError(
            f"{source}: rebuilt judge fingerprint {config.judge.fingerprint} differs from the "
            f"recorded {record.judge}"
        )
    if config.detector.fingerprint != record.refusal_detector:
        raise ConfigError(f"{source}: rebuilt refusal detector differs from the recorded one")
    return config


def _judge_section(judge: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in judge.items() if v is not None}
    if out.get("kind") != "python":
        out.pop("params", None)
        out.pop("code_sha256", None)
    return out
