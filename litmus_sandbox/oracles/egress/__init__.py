"""The egress oracle: every network request a tool makes, seen by a recording transport or a
loopback forward proxy (strict mode: an empty network namespace whose only way out is that
proxy), decided by the egress policy and recorded as egress events.
"""

from __future__ import annotations

from litmus_sandbox.oracles.egress._forward_proxy import ForwardProxy as ForwardProxy
from litmus_sandbox.oracles.egress._http_wire import parse_sni as parse_sni
from litmus_sandbox.oracles.egress._http_wire import proxy_env as proxy_env
from litmus_sandbox.oracles.egress._netns import run_strict as run_strict
from litmus_sandbox.oracles.egress._netns import strict_available as strict_available
from litmus_sandbox.oracles.egress._netns import strict_command as strict_command
from litmus_sandbox.oracles.egress._probe import EGRESS_MODES as EGRESS_MODES
from litmus_sandbox.oracles.egress._probe import REPLAY_ON_MISS as REPLAY_ON_MISS
from litmus_sandbox.oracles.egress._probe import EgressFlow as EgressFlow
from litmus_sandbox.oracles.egress._probe import EgressMode as EgressMode
from litmus_sandbox.oracles.egress._probe import EgressPolicy as EgressPolicy
from litmus_sandbox.oracles.egress._probe import EgressProbe as EgressProbe
from litmus_sandbox.oracles.egress._probe import EgressRule as EgressRule
from litmus_sandbox.oracles.egress._probe import EgressSink as EgressSink
from litmus_sandbox.oracles.egress._probe import EgressTransport as EgressTransport
from litmus_sandbox.oracles.egress._probe import HttpCassette as HttpCassette
from litmus_sandbox.oracles.egress._probe import HttpExchange as HttpExchange
from litmus_sandbox.oracles.egress._probe import HttpRecorder as HttpRecorder
from litmus_sandbox.oracles.egress._probe import SyncEgressTransport as SyncEgressTransport
from litmus_sandbox.oracles.egress._probe import calling as calling
from litmus_sandbox.oracles.egress._probe import current_call as current_call
from litmus_sandbox.oracles.egress._probe import denied_body as denied_body
from litmus_sandbox.oracles.egress._probe import normalize_host as normalize_host
from litmus_sandbox.oracles.egress._probe import split_host_port as split_host_port

__all__ = [
    "EGRESS_MODES",
    "REPLAY_ON_MISS",
    "EgressFlow",
    "EgressMode",
    "EgressPolicy",
    "EgressProbe",
    "EgressRule",
    "EgressSink",
    "EgressTransport",
    "ForwardProxy",
    "HttpCassette",
    "HttpExchange",
    "HttpRecorder",
    "SyncEgressTransport",
    "calling",
    "current_call",
    "denied_body",
    "normalize_host",
    "parse_sni",
    "proxy_env",
    "run_strict",
    "split_host_port",
    "strict_available",
    "strict_command",
]
