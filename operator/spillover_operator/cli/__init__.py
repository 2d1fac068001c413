"""spilloverctl: the kill switch and status view for SpilloverPolicy (see docs/spilloverctl.md).

`main` is the console script. It imports nothing heavy itself: the command's modules
load inside its try, so a Ctrl-C in the first moments ends as an interruption (exit
130, one line, no traceback), as `cli.main.run` ends one later. One before that (Python
starting) is held back by the launcher `make install` writes and delivered inside the
try (`accept_interrupts`).
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    """The console script `spilloverctl`: exits with the command's code."""
    try:
        from spillover_operator.interrupts import accept_interrupts, deliver_lost_interrupts

        deliver_lost_interrupts()
        accept_interrupts()
        from spillover_operator.cli.main import run
    except BaseException as error:
        from spillover_operator.interrupts import caused_by_interrupt

        if not caused_by_interrupt(error):
            raise
        from spillover_operator.exit_codes import INTERRUPTED

        sys.stderr.write("spilloverctl: interrupted while starting; nothing was sent\n")
        raise SystemExit(INTERRUPTED) from None
    raise SystemExit(run())
