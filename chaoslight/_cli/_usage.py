"""Usage errors and help: a mistake in how the command was called is one line, exit 2;
every option's help says its default."""

from __future__ import annotations

import argparse
from typing import Any

EXIT_CLEAN = 0  # nothing found (or a flaky failure only)
EXIT_FOUND = 1  # a reproduced failure, or a target that fails with no fault injected
USAGE_STATUS = 2
EXIT_INTERNAL = 3  # an internal error of chaoslight itself: a bug to report, not a finding
ENVIRONMENT_STATUS = 4  # the workers did not start: the machine, not the program
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT), as a shell reports a command that SIGINT ended


class UsageError(Exception):
    """A mistake in how the command was called: one line, exit status 2 (or ``status``)."""

    def __init__(self, message: str, status: int = USAGE_STATUS) -> None:
        super().__init__(message)
        self.status = status


class DefaultsFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help unless it already says its default.

    A default of None, False or an empty list means "not given": the help text says in
    words what happens then.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or "default" in text.lower() or not action.option_strings:
            return text
        if action.default in (None, False, [], argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)".strip()


class RawDefaultsFormatter(argparse.RawDescriptionHelpFormatter, DefaultsFormatter):
    """Defaults as above; the description and epilog (a table of exit statuses) kept as typed."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors raise ``UsageError`` instead of exiting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)
