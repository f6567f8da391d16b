"""The argument parser every command shares, the MCP proxy's included: a usage mistake is one
line (no usage block) and exit 2."""

from __future__ import annotations

import argparse
from typing import NoReturn

EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """A usage mistake: one line (no usage block), exit 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
