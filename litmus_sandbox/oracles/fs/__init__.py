"""The filesystem oracle: snapshots of the sandbox root and tripwire directories, refreshed at
every call boundary, diffed into effects. Public: :class:`FsProbe`.
"""

from __future__ import annotations

from litmus_sandbox.oracles.fs._probe import FsProbe as FsProbe

__all__ = ["FsProbe"]
