"""Usage errors: a mistake in how the command was called is one line and exit status 2."""

from __future__ import annotations

import argparse


class UsageError(Exception):
    """A mistake in how the command was called: one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors raise ``UsageError`` instead of exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)
