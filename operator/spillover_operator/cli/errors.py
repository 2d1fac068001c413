"""spilloverctl's own failure type and the one mapping from failures to exit codes.

The numbers are the shared table (`spillover_operator.exit_codes`); the client library
raises types without codes, and this module alone decides which code each one gets.
"""

from __future__ import annotations

from typing import Final

from spillover_operator import exit_codes
from spillover_operator.client import (
    ClientError,
    NotFound,
    OperatorRefused,
    TimedOut,
)

# What spilloverctl can return (its --help lists these rows of the table).
CODES: Final[tuple[int, ...]] = (
    exit_codes.OK,
    exit_codes.INTERNAL,
    exit_codes.BAD_INPUT,
    exit_codes.TIMEOUT,
    exit_codes.NOT_FOUND,
    exit_codes.API,
    exit_codes.MISMATCH,
    exit_codes.EXTRA_REFUSED,
    exit_codes.INTERRUPTED,
)

EXIT_CODES_HELP: Final = exit_codes.describe(CODES)


class BadInput(Exception):
    """A file, a value or a policy that spilloverctl cannot use; the message names the
    file or field and the fix. Printed as `spilloverctl: error: <message>`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def exit_code(error: BadInput | ClientError) -> int:
    """The exit code of an expected failure."""
    if isinstance(error, BadInput):
        return exit_codes.BAD_INPUT
    if isinstance(error, NotFound):
        return exit_codes.NOT_FOUND
    if isinstance(error, TimedOut):
        return exit_codes.TIMEOUT
    if isinstance(error, OperatorRefused):
        return exit_codes.MISMATCH
    # ConfigError, ApiUnavailable, Unauthorized, Forbidden, Rejected, Conflict, ApiError
    return exit_codes.API
