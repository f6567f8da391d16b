"""litmus-sandbox: record agent trajectories honestly, observe their side effects, and gate
releases only on comparable verdicts."""

from __future__ import annotations

from ._cache import VerdictCache as VerdictCache
from ._config import PythonJudge as PythonJudge
from ._config import ScoringConfig as ScoringConfig
from ._config import config_from_mapping as config_from_mapping
from ._config import config_from_record as config_from_record
from ._config import load_policy as load_policy
from ._diff import Change as Change
from ._diff import EpisodeDiff as EpisodeDiff
from ._diff import diff_episodes as diff_episodes
from ._divergence import ReplayReport as ReplayReport
from ._divergence import check_episodes as check_episodes
from ._divergence import report_from_log as report_from_log
from ._errors import ConfigError as ConfigError
from ._errors import JudgeError as JudgeError
from ._errors import LitmusError as LitmusError
from ._errors import NewerVersionError as NewerVersionError
from ._errors import RecordDecodeError as RecordDecodeError
from ._errors import ReplayLogError as ReplayLogError
from ._errors import UpstreamError as UpstreamError
from ._gate import CaseResult as CaseResult
from ._gate import Reason as Reason
from ._gate import compare_case as compare_case
from ._gate import step_diff as step_diff
from ._jsonpath import differing_paths as differing_paths
from ._open_call import OpenCall as OpenCall
from ._policy import Policy as Policy
from ._policy import Stub as Stub
from ._policy import ToolPolicy as ToolPolicy
from ._policy_file import read_policy_file as read_policy_file
from ._records import SCHEMA_VERSION as SCHEMA_VERSION
from ._records import Actual as Actual
from ._records import Effects as Effects
from ._records import EgressEvent as EgressEvent
from ._records import Episode as Episode
from ._records import EpisodeEnd as EpisodeEnd
from ._records import EpisodeHeader as EpisodeHeader
from ._records import Finding as Finding
from ._records import FsEffect as FsEffect
from ._records import LegacyProvenance as LegacyProvenance
from ._records import LegacyVerdict as LegacyVerdict
from ._records import MessageStep as MessageStep
from ._records import PolicyRecord as PolicyRecord
from ._records import Provenance as Provenance
from ._records import Recorder as Recorder
from ._records import RecorderId as RecorderId
from ._records import ReplaySource as ReplaySource
from ._records import Shown as Shown
from ._records import StepVerdict as StepVerdict
from ._records import ToolCallStep as ToolCallStep
from ._records import Verdict as Verdict
from ._replay import Cassette as Cassette
from ._replay_match import CallRef as CallRef
from ._replay_match import Divergence as Divergence
from ._replay_match import ReplayOptions as ReplayOptions
from ._replay_match import ReplaySession as ReplaySession
from ._replay_match import Served as Served
from ._rules import RulesJudge as RulesJudge
from ._sandbox import EpisodeRecorder as EpisodeRecorder
from ._sandbox import Sandbox as Sandbox
from ._scorer import ScoreStats as ScoreStats
from ._scorer import score_episode as score_episode
from ._scorer import score_episodes as score_episodes
from ._scorer import score_files as score_files
from ._scoring import RefusalDetector as RefusalDetector
from ._scoring import ScoringPolicy as ScoringPolicy
from ._scoring import StepJudgment as StepJudgment
from ._scoring import coverage as coverage
from ._store import JsonlWriter as JsonlWriter
from ._store import ReadWarning as ReadWarning
from ._store import RecordingWarning as RecordingWarning
from ._store import VerdictStream as VerdictStream
from ._store import iter_episodes as iter_episodes
from ._store import read_episodes as read_episodes
from ._store import read_verdicts as read_verdicts
from ._store import write_verdicts as write_verdicts
from ._suite import GateReport as GateReport
from ._suite import gate as gate
from ._suite import mcnemar_exact_p as mcnemar_exact_p
from ._tool_calls import ToolResult as ToolResult
from .oracles.egress import EgressPolicy as EgressPolicy
from .oracles.egress import EgressProbe as EgressProbe
from .oracles.fs import FsProbe as FsProbe
from .oracles.state import StateProbe as StateProbe

__version__ = "0.1.0"

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
    "load_policy",
    "mcnemar_exact_p",
    "read_episodes",
    "read_policy_file",
    "read_verdicts",
    "report_from_log",
    "score_episode",
    "score_episodes",
    "score_files",
    "step_diff",
    "write_verdicts",
]
