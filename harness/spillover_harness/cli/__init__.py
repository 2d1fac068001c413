"""`spillover-harness`: run the spillover validation matrix and decide the default.

One module per command (`run`, `evaluate`, `report`, `preflight`, `fixtures`,
`sweep`, `sensitivity`, `apply_decision`),
`app` builds the parser and maps errors to the exit codes of the one shared
table (`spillover_operator.exit_codes`), `outcome` turns a verdict into the
printed decision and the exit code.

This module imports nothing heavy on purpose: the console script imports it
before anything else, and a Ctrl-C while pydantic, PyYAML and the rest load
must end as an interruption (exit 130, no traceback), so they load inside
`main`'s try. A Ctrl-C before that (Python starting, this module loading) is
held back by the launcher `make install` writes and delivered inside the try
(`accept_interrupts`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from spillover_operator.interrupts import (
    accept_interrupts,
    caused_by_interrupt,
    deliver_lost_interrupts,
)

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """The console script `spillover-harness` (argv defaults to sys.argv[1:])."""
    deliver_lost_interrupts()
    try:
        accept_interrupts()
        from spillover_harness.cli.app import dispatch

        return dispatch(list(sys.argv[1:] if argv is None else argv))
    except Exception as error:  # a Ctrl-C while the modules load, before the commands catch it
        if not caused_by_interrupt(error):
            raise
        return _interrupted()
    except KeyboardInterrupt:
        return _interrupted()


def _interrupted() -> int:
    from spillover_operator.exit_codes import INTERRUPTED

    print("interrupted", file=sys.stderr, flush=True)
    return INTERRUPTED
