"""``python -m litmus_sandbox._cli``: the command line, as the console script runs it."""

from __future__ import annotations

import sys

from litmus_sandbox._cli.main import main

sys.exit(main())
