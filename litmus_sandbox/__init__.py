"""litmus-sandbox: record agent trajectories honestly, observe their side effects, and gate
releases only on comparable verdicts.

Every public name is re-exported lazily (PEP 562): ``import litmus_sandbox`` loads nothing,
and using the model, core and store names (``gate``, ``compare_case``, ``Verdict`` …) loads no
I/O library (anyio, httpx, watchdog, sqlite3, h11). The layer map is in CONTRIBUTING.md.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from litmus_sandbox._config.document import read_policy_file as read_policy_file
    from litmus_sandbox._config.egress import EgressPolicy as EgressPolicy
    from litmus_sandbox._config.policy import Policy as Policy
    from litmus_sandbox._config.policy import Stub as Stub
    from litmus_sandbox._config.policy import ToolPolicy as ToolPolicy
    from litmus_sandbox._core.diff import Change as Change
    from litmus_sandbox._core.diff import EpisodeDiff as EpisodeDiff
    from litmus_sandbox._core.diff import diff_episodes as diff_episodes
    from litmus_sandbox._core.divergence import ReplayReport as ReplayReport
    from litmus_sandbox._core.divergence import check_episodes as check_episodes
    from litmus_sandbox._core.divergence import report_from_log as report_from_log
    from litmus_sandbox._core.gate import CaseResult as CaseResult
    from litmus_sandbox._core.gate import Reason as Reason
    from litmus_sandbox._core.gate import compare_case as compare_case
    from litmus_sandbox._core.gate import step_diff as step_diff
    from litmus_sandbox._core.replay_match import CallRef as CallRef
    from litmus_sandbox._core.replay_match import Divergence as Divergence
    from litmus_sandbox._core.replay_match import ReplayOptions as ReplayOptions
    from litmus_sandbox._core.replay_match import ReplaySession as ReplaySession
    from litmus_sandbox._core.replay_match import Served as Served
    from litmus_sandbox._core.rules import RulesJudge as RulesJudge
    from litmus_sandbox._core.scoring import RefusalDetector as RefusalDetector
    from litmus_sandbox._core.scoring import ScoringPolicy as ScoringPolicy
    from litmus_sandbox._core.scoring import StepJudgment as StepJudgment
    from litmus_sandbox._core.scoring import coverage as coverage
    from litmus_sandbox._core.suite import GateReport as GateReport
    from litmus_sandbox._core.suite import GateSummary as GateSummary
    from litmus_sandbox._core.suite import gate as gate
    from litmus_sandbox._core.suite import mcnemar_exact_p as mcnemar_exact_p
    from litmus_sandbox._core.suite import stream_gate as stream_gate
    from litmus_sandbox._model.errors import ConfigError as ConfigError
    from litmus_sandbox._model.errors import JudgeError as JudgeError
    from litmus_sandbox._model.errors import LitmusError as LitmusError
    from litmus_sandbox._model.errors import NewerVersionError as NewerVersionError
    from litmus_sandbox._model.errors import RecordDecodeError as RecordDecodeError
    from litmus_sandbox._model.errors import ReplayLogError as ReplayLogError
    from litmus_sandbox._model.errors import UpstreamError as UpstreamError
    from litmus_sandbox._model.jsonpath import differing_paths as differing_paths
    from litmus_sandbox._model.lossless import restore_original as restore_original
    from litmus_sandbox._model.records import SCHEMA_VERSION as SCHEMA_VERSION
    from litmus_sandbox._model.records import Actual as Actual
    from litmus_sandbox._model.records import Effects as Effects
    from litmus_sandbox._model.records import EgressEvent as EgressEvent
    from litmus_sandbox._model.records import Episode as Episode
    from litmus_sandbox._model.records import EpisodeEnd as EpisodeEnd
    from litmus_sandbox._model.records import EpisodeHeader as EpisodeHeader
    from litmus_sandbox._model.records import Finding as Finding
    from litmus_sandbox._model.records import FsEffect as FsEffect
    from litmus_sandbox._model.records import LegacyProvenance as LegacyProvenance
    from litmus_sandbox._model.records import LegacyVerdict as LegacyVerdict
    from litmus_sandbox._model.records import MessageStep as MessageStep
    from litmus_sandbox._model.records import PolicyRecord as PolicyRecord
    from litmus_sandbox._model.records import Provenance as Provenance
    from litmus_sandbox._model.records import Recorder as Recorder
    from litmus_sandbox._model.records import RecorderId as RecorderId
    from litmus_sandbox._model.records import ReplaySource as ReplaySource
    from litmus_sandbox._model.records import Shown as Shown
    from litmus_sandbox._model.records import StepVerdict as StepVerdict
    from litmus_sandbox._model.records import ToolCallStep as ToolCallStep
    from litmus_sandbox._model.records import Verdict as Verdict
    from litmus_sandbox._runtime.open_call import OpenCall as OpenCall
    from litmus_sandbox._runtime.replay import Cassette as Cassette
    from litmus_sandbox._runtime.sandbox import EpisodeRecorder as EpisodeRecorder
    from litmus_sandbox._runtime.sandbox import Sandbox as Sandbox
    from litmus_sandbox._runtime.scorer import ScoreStats as ScoreStats
    from litmus_sandbox._runtime.scorer import score_episode as score_episode
    from litmus_sandbox._runtime.scorer import score_episodes as score_episodes
    from litmus_sandbox._runtime.scorer import score_files as score_files
    from litmus_sandbox._runtime.tool_calls import ToolResult as ToolResult
    from litmus_sandbox._store.cache import VerdictCache as VerdictCache
    from litmus_sandbox._store.step_cache import StepCache as StepCache
    from litmus_sandbox._store.step_cache import open_cache as open_cache
    from litmus_sandbox._store.streams import JsonlWriter as JsonlWriter
    from litmus_sandbox._store.streams import ReadWarning as ReadWarning
    from litmus_sandbox._store.streams import RecordingWarning as RecordingWarning
    from litmus_sandbox._store.streams import VerdictStream as VerdictStream
    from litmus_sandbox._store.streams import iter_episodes as iter_episodes
    from litmus_sandbox._store.streams import iter_verdicts as iter_verdicts
    from litmus_sandbox._store.streams import read_episodes as read_episodes
    from litmus_sandbox._store.streams import read_verdicts as read_verdicts
    from litmus_sandbox._store.streams import write_verdicts as write_verdicts
    from litmus_sandbox.judges._python import PythonJudge as PythonJudge
    from litmus_sandbox.judges._scoring import ScoringConfig as ScoringConfig
    from litmus_sandbox.judges._scoring import config_from_mapping as config_from_mapping
    from litmus_sandbox.judges._scoring import config_from_record as config_from_record
    from litmus_sandbox.judges._scoring import load_policy as load_policy
    from litmus_sandbox.oracles.egress import EgressProbe as EgressProbe
    from litmus_sandbox.oracles.fs import FsProbe as FsProbe
    from litmus_sandbox.oracles.state import StateProbe as StateProbe

__version__ = "0.1.0"

# name -> the module that defines it; resolved on first use, then cached in globals().
_EXPORTS: dict[str, str] = {
    "Actual": "litmus_sandbox._model.records",
    "CallRef": "litmus_sandbox._core.replay_match",
    "CaseResult": "litmus_sandbox._core.gate",
    "Cassette": "litmus_sandbox._runtime.replay",
    "Change": "litmus_sandbox._core.diff",
    "check_episodes": "litmus_sandbox._core.divergence",
    "compare_case": "litmus_sandbox._core.gate",
    "config_from_mapping": "litmus_sandbox.judges._scoring",
    "config_from_record": "litmus_sandbox.judges._scoring",
    "ConfigError": "litmus_sandbox._model.errors",
    "coverage": "litmus_sandbox._core.scoring",
    "diff_episodes": "litmus_sandbox._core.diff",
    "differing_paths": "litmus_sandbox._model.jsonpath",
    "Divergence": "litmus_sandbox._core.replay_match",
    "Effects": "litmus_sandbox._model.records",
    "EgressEvent": "litmus_sandbox._model.records",
    "EgressPolicy": "litmus_sandbox._config.egress",
    "EgressProbe": "litmus_sandbox.oracles.egress",
    "Episode": "litmus_sandbox._model.records",
    "EpisodeDiff": "litmus_sandbox._core.diff",
    "EpisodeEnd": "litmus_sandbox._model.records",
    "EpisodeHeader": "litmus_sandbox._model.records",
    "EpisodeRecorder": "litmus_sandbox._runtime.sandbox",
    "Finding": "litmus_sandbox._model.records",
    "FsEffect": "litmus_sandbox._model.records",
    "FsProbe": "litmus_sandbox.oracles.fs",
    "gate": "litmus_sandbox._core.suite",
    "GateReport": "litmus_sandbox._core.suite",
    "GateSummary": "litmus_sandbox._core.suite",
    "iter_episodes": "litmus_sandbox._store.streams",
    "JsonlWriter": "litmus_sandbox._store.streams",
    "JudgeError": "litmus_sandbox._model.errors",
    "LegacyProvenance": "litmus_sandbox._model.records",
    "LegacyVerdict": "litmus_sandbox._model.records",
    "LitmusError": "litmus_sandbox._model.errors",
    "load_policy": "litmus_sandbox.judges._scoring",
    "mcnemar_exact_p": "litmus_sandbox._core.suite",
    "stream_gate": "litmus_sandbox._core.suite",
    "MessageStep": "litmus_sandbox._model.records",
    "NewerVersionError": "litmus_sandbox._model.errors",
    "OpenCall": "litmus_sandbox._runtime.open_call",
    "Policy": "litmus_sandbox._config.policy",
    "PolicyRecord": "litmus_sandbox._model.records",
    "Provenance": "litmus_sandbox._model.records",
    "PythonJudge": "litmus_sandbox.judges._python",
    "read_episodes": "litmus_sandbox._store.streams",
    "read_policy_file": "litmus_sandbox._config.document",
    "read_verdicts": "litmus_sandbox._store.streams",
    "iter_verdicts": "litmus_sandbox._store.streams",
    "ReadWarning": "litmus_sandbox._store.streams",
    "Reason": "litmus_sandbox._core.gate",
    "RecordDecodeError": "litmus_sandbox._model.errors",
    "Recorder": "litmus_sandbox._model.records",
    "RecorderId": "litmus_sandbox._model.records",
    "RecordingWarning": "litmus_sandbox._store.streams",
    "RefusalDetector": "litmus_sandbox._core.scoring",
    "ReplayLogError": "litmus_sandbox._model.errors",
    "ReplayOptions": "litmus_sandbox._core.replay_match",
    "ReplayReport": "litmus_sandbox._core.divergence",
    "ReplaySession": "litmus_sandbox._core.replay_match",
    "ReplaySource": "litmus_sandbox._model.records",
    "report_from_log": "litmus_sandbox._core.divergence",
    "restore_original": "litmus_sandbox._model.lossless",
    "RulesJudge": "litmus_sandbox._core.rules",
    "Sandbox": "litmus_sandbox._runtime.sandbox",
    "SCHEMA_VERSION": "litmus_sandbox._model.records",
    "score_episode": "litmus_sandbox._runtime.scorer",
    "score_episodes": "litmus_sandbox._runtime.scorer",
    "score_files": "litmus_sandbox._runtime.scorer",
    "ScoreStats": "litmus_sandbox._runtime.scorer",
    "ScoringConfig": "litmus_sandbox.judges._scoring",
    "ScoringPolicy": "litmus_sandbox._core.scoring",
    "Served": "litmus_sandbox._core.replay_match",
    "Shown": "litmus_sandbox._model.records",
    "StateProbe": "litmus_sandbox.oracles.state",
    "step_diff": "litmus_sandbox._core.gate",
    "StepCache": "litmus_sandbox._store.step_cache",
    "StepJudgment": "litmus_sandbox._core.scoring",
    "StepVerdict": "litmus_sandbox._model.records",
    "Stub": "litmus_sandbox._config.policy",
    "ToolCallStep": "litmus_sandbox._model.records",
    "ToolPolicy": "litmus_sandbox._config.policy",
    "ToolResult": "litmus_sandbox._runtime.tool_calls",
    "UpstreamError": "litmus_sandbox._model.errors",
    "Verdict": "litmus_sandbox._model.records",
    "VerdictCache": "litmus_sandbox._store.cache",
    "open_cache": "litmus_sandbox._store.step_cache",
    "VerdictStream": "litmus_sandbox._store.streams",
    "write_verdicts": "litmus_sandbox._store.streams",
}

__all__ = [
    "SCHEMA_VERSION",
    "Actual",
    "CallRef",
    "CaseResult",
    "Cassette",
    "Change",
    "ConfigError",
    "Divergence",
    "Effects",
    "EgressEvent",
    "EgressPolicy",
    "EgressProbe",
    "Episode",
    "EpisodeDiff",
    "EpisodeEnd",
    "EpisodeHeader",
    "EpisodeRecorder",
    "Finding",
    "FsEffect",
    "FsProbe",
    "GateReport",
    "GateSummary",
    "JsonlWriter",
    "JudgeError",
    "LegacyProvenance",
    "LegacyVerdict",
    "LitmusError",
    "MessageStep",
    "NewerVersionError",
    "OpenCall",
    "Policy",
    "PolicyRecord",
    "Provenance",
    "PythonJudge",
    "ReadWarning",
    "Reason",
    "RecordDecodeError",
    "Recorder",
    "RecorderId",
    "RecordingWarning",
    "RefusalDetector",
    "ReplayLogError",
    "ReplayOptions",
    "ReplayReport",
    "ReplaySession",
    "ReplaySource",
    "RulesJudge",
    "Sandbox",
    "ScoreStats",
    "ScoringConfig",
    "ScoringPolicy",
    "Served",
    "Shown",
    "StateProbe",
    "StepCache",
    "StepJudgment",
    "StepVerdict",
    "Stub",
    "ToolCallStep",
    "ToolPolicy",
    "ToolResult",
    "UpstreamError",
    "Verdict",
    "VerdictCache",
    "VerdictStream",
    "check_episodes",
    "compare_case",
    "config_from_mapping",
    "config_from_record",
    "coverage",
    "diff_episodes",
    "differing_paths",
    "gate",
    "iter_episodes",
    "iter_verdicts",
    "load_policy",
    "mcnemar_exact_p",
    "open_cache",
    "read_episodes",
    "read_policy_file",
    "read_verdicts",
    "report_from_log",
    "restore_original",
    "score_episode",
    "score_episodes",
    "score_files",
    "step_diff",
    "stream_gate",
    "write_verdicts",
]


def _lazy_exports(
    package: str, exports: Mapping[str, str], listed: Iterable[str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The PEP 562 ``__getattr__`` and ``__dir__`` of ``package`` (this one, and the
    adapters'): ``exports`` maps each name to its module, imported the first time the
    name is looked up, then kept on the package; ``dir()`` lists ``listed``, sorted.
    Defined here, not in a module of its own, so that ``import litmus_sandbox`` loads
    nothing."""
    names = sorted(listed)

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next lookup does not come here
        return value

    def __dir__() -> list[str]:
        return list(names)

    return __getattr__, __dir__


# dir() lists only the public names: the helpers this module imports are not part of it.
__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, [*__all__, "__version__"])
