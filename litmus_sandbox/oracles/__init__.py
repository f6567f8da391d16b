"""Side-effect oracles: filesystem, network egress and state probes, and findings.

The probes are importable from here (``from litmus_sandbox.oracles import FsProbe``) as well
as from their modules.
"""

from litmus_sandbox.oracles.egress import EgressPolicy as EgressPolicy
from litmus_sandbox.oracles.egress import EgressProbe as EgressProbe
from litmus_sandbox.oracles.fs import FsProbe as FsProbe
from litmus_sandbox.oracles.state import StateProbe as StateProbe

__all__ = ["EgressPolicy", "EgressProbe", "FsProbe", "StateProbe"]
