"""Side-effect oracles: filesystem, network egress and state probes, and findings.

The probes are importable from here (``from litmus_sandbox.oracles import FsProbe``) as well
as from their modules.
"""

from .egress import EgressPolicy as EgressPolicy
from .egress import EgressProbe as EgressProbe
from .fs import FsProbe as FsProbe
from .state import StateProbe as StateProbe

__all__ = ["EgressPolicy", "EgressProbe", "FsProbe", "StateProbe"]
