"""From a decoded policy document to a live scoring configuration: judges built, detector set.

The configuration layer below (``litmus_sandbox._config``) decodes and checks the policy
file and knows nothing of live judges. Here :func:`judge_from_config` builds the judge a
``[judge]`` table names (importing a Python judge's code), and :class:`ScoringConfig`
holds everything that turns an episode into a verdict. A verdict stream's policy record
rebuilds the same configuration (:func:`config_from_record`, for ``rebaseline --like``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from litmus_sandbox._config.document import PolicyDocument, decode_document, read_document
from litmus_sandbox._config.scoring import (
    JudgeConfig,
    OpenAIJudgeConfig,
    PythonJudgeConfig,
    RulesJudgeConfig,
)
from litmus_sandbox._core.rules import RulesJudge
from litmus_sandbox._core.scoring import Judge, RefusalDetector, ScoringPolicy
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import SCHEMA_VERSION, PolicyRecord
from litmus_sandbox.judges._python import PythonJudge
from litmus_sandbox.judges._secrets import REDACTED


class ScoringConfig:
    """Everything that turns an episode into a verdict: policy, detector, judge(s).

    Raises:
        ConfigError: negative ``retries``, or a reduction other than ``all``.
    """

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
        """The policy record that heads a verdict stream scored with this configuration."""
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


def judge_from_config(
    cfg: JudgeConfig, *, base_dir: str | None = None, where: str = "[judge]"
) -> Judge:
    """Build the judge a ``[judge]`` table configures.

    Args:
        cfg: the decoded table.
        base_dir: where a Python judge's module or relative ``path`` is looked for
            (the working directory when None).
        where: the file and table, for messages.

    Raises:
        ConfigError: the judge cannot be built (bad rules, a Python judge that cannot be
            loaded, or whose code changed since ``cfg.code_sha256`` was recorded).
    """
    try:
        if isinstance(cfg, RulesJudgeConfig):
            return RulesJudge(cfg.rules, label=cfg.label or "rules")
        if isinstance(cfg, OpenAIJudgeConfig):
            # Imported here: httpx and tenacity load only for a policy that asks for HTTP.
            from litmus_sandbox.judges._openai import OpenAIJudge

            return OpenAIJudge(cfg.params, label=cfg.label)
        judge = PythonJudge(
            cfg.entry,
            label=cfg.label,
            path=cfg.path,
            params=cfg.params,
            base_dir=base_dir,
            secrets=cfg.secrets,
        )
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if cfg.code_sha256 is not None and cfg.code_sha256 != judge.code_sha256:
        raise ConfigError(
            f"{where}: the code of judge {cfg.entry!r} changed since the verdicts were "
            f"scored (sha256 {cfg.code_sha256[:12]} then, {judge.code_sha256[:12]} now)"
        )
    return judge


def config_from_document(doc: PolicyDocument, *, base_dir: str | None = None) -> ScoringConfig:
    """The scoring configuration of a decoded policy document, its judges built.

    Args:
        doc: the document (:func:`~litmus_sandbox._config.document.read_document`).
        base_dir: where Python judges are looked for; default the document's folder.

    Raises:
        ConfigError: a judge that cannot be built.
    """
    base = base_dir if base_dir is not None else doc.base_dir
    judge = judge_from_config(doc.judge, base_dir=base, where=f"{doc.source}: [judge]")
    fallback = None
    if doc.judge.fallback is not None:
        where = f"{doc.source}: [judge.fallback]"
        fallback = judge_from_config(doc.judge.fallback, base_dir=base, where=where)
    refusal = doc.refusal
    detector = RefusalDetector(
        name=refusal.name,
        version=refusal.version,
        **({"patterns": refusal.patterns} if refusal.patterns is not None else {}),
    )
    return ScoringConfig(
        judge=judge,
        policy=doc.scoring,
        detector=detector,
        retries=doc.judge.retries,
        fallback=fallback,
        forbidden_findings=doc.oracle.forbidden_findings,
    )


def config_from_mapping(
    data: Mapping[str, Any], *, source: str = "policy", base_dir: str | None = None
) -> ScoringConfig:
    """Build a :class:`ScoringConfig` from a parsed policy mapping (checked whole).

    Raises:
        ConfigError: unknown tables or keys, wrong types, or a judge that cannot be built.
    """
    return config_from_document(decode_document(data, source=source, base_dir=base_dir))


def load_policy(path: str | os.PathLike[str]) -> ScoringConfig:
    """Read a policy file (TOML). Python judges' ``path`` is relative to the file.

    Raises:
        ConfigError: the file is missing, not TOML, or not a valid policy.
    """
    return config_from_document(read_document(path))


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
    if REDACTED in repr(data):
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
    if out.get("kind") not in (PythonJudgeConfig.kind, OpenAIJudgeConfig.kind):
        out.pop("params", None)
    if out.get("kind") != PythonJudgeConfig.kind:
        out.pop("code_sha256", None)
    return out
