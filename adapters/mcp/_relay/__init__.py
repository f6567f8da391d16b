"""The MCP relay's sans-io core: one :class:`Relay` per session, its actions, its states.

stdio is its driver (``_stdio_session.py``); see ``_core.py`` for the theory of
operation and ``_states.py`` for the state table of a request.
"""

from __future__ import annotations

from ._actions import (
    Abort as Abort,
)
from ._actions import (
    Action as Action,
)
from ._actions import (
    CutOff as CutOff,
)
from ._actions import (
    EndStartup as EndStartup,
)
from ._actions import (
    FinishCall as FinishCall,
)
from ._actions import (
    KeepAnswer as KeepAnswer,
)
from ._actions import (
    Note as Note,
)
from ._actions import (
    Offer as Offer,
)
from ._actions import (
    StartCall as StartCall,
)
from ._actions import (
    ToClient as ToClient,
)
from ._actions import (
    ToServer as ToServer,
)
from ._core import Relay as Relay
from ._guard import valid_id as valid_id
from ._limits import DEFAULT_MAX_DEPTH as DEFAULT_MAX_DEPTH
from ._limits import DEFAULT_MAX_MESSAGE_BYTES as DEFAULT_MAX_MESSAGE_BYTES
from ._states import Pending as Pending
from ._states import State as State
