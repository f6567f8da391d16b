"""``python -m litmus_sandbox``: the command line, as the ``litmus-sandbox`` script runs it."""

from __future__ import annotations

import sys

from litmus_sandbox._cli.main import main

if __name__ == "__main__":
    sys.exit(main())
