"""The egress oracle: every network request a tool makes, seen by a recording transport or a
loopback forward proxy (strict mode: an empty network namespace whose only way out is that
proxy), decided by the egress policy and recorded as egress events.

The modules, each importing only those above it in this list:

* ``_netns``: strict mode's bridge, a script run inside the namespace (no package imports);
* ``_streams``: the proxy's TCP connections as byte streams (lean ones on asyncio);
* ``_flow``: flows, sinks and the call in flight (the types every observer shares);
* ``_http_wire``: what h11 does not do (request targets, TLS SNI, proxy env), sans-io;
* ``_replay``: egress cassettes and their recorder;
* ``_transport``: the in-process httpx transports (one decision core, async and sync shells);
* ``_probe``: the probe that attributes flows to tool calls;
* ``_downstream``, ``_upstream``: h11 on the client and the server side of the proxy;
* ``_waiting``: waiting for an upstream's answer while the client may give up;
* ``_relay``, ``_tunnel``: plain HTTP forwarding and CONNECT tunnels;
* ``_forward_proxy``: the proxy's listeners and request routing;
* ``_strict``: strict mode from the caller's side.
"""

from __future__ import annotations

from litmus_sandbox._config.egress import EGRESS_MODES as EGRESS_MODES
from litmus_sandbox._config.egress import EgressMode as EgressMode
from litmus_sandbox._config.egress import EgressPolicy as EgressPolicy
from litmus_sandbox._config.egress import EgressRule as EgressRule
from litmus_sandbox._config.egress import denied_body as denied_body
from litmus_sandbox._config.egress import normalize_host as normalize_host
from litmus_sandbox._config.egress import split_host_port as split_host_port
from litmus_sandbox.oracles.egress._flow import EgressFlow as EgressFlow
from litmus_sandbox.oracles.egress._flow import EgressSink as EgressSink
from litmus_sandbox.oracles.egress._flow import calling as calling
from litmus_sandbox.oracles.egress._flow import current_call as current_call
from litmus_sandbox.oracles.egress._forward_proxy import ForwardProxy as ForwardProxy
from litmus_sandbox.oracles.egress._http_wire import parse_sni as parse_sni
from litmus_sandbox.oracles.egress._http_wire import proxy_env as proxy_env
from litmus_sandbox.oracles.egress._probe import EgressProbe as EgressProbe
from litmus_sandbox.oracles.egress._replay import REPLAY_ON_MISS as REPLAY_ON_MISS
from litmus_sandbox.oracles.egress._replay import HttpCassette as HttpCassette
from litmus_sandbox.oracles.egress._replay import HttpExchange as HttpExchange
from litmus_sandbox.oracles.egress._replay import HttpRecorder as HttpRecorder
from litmus_sandbox.oracles.egress._strict import run_strict as run_strict
from litmus_sandbox.oracles.egress._strict import strict_available as strict_available
from litmus_sandbox.oracles.egress._strict import strict_command as strict_command
from litmus_sandbox.oracles.egress._transport import EgressTransport as EgressTransport
from litmus_sandbox.oracles.egress._transport import SyncEgressTransport as SyncEgressTransport

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
