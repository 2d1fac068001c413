"""The one exit-code table of `spilloverctl` and `spillover-harness`.

Scripts (and operators in an incident) branch on these numbers, so each number
means one thing in both commands, and an unexpected crash is never mistaken for
an answer: 1 is only ever "a bug". Errors raised by the libraries are types
without exit codes; each CLI maps them to a code from this table.
docs/exit-codes.md is this table in prose.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Final

OK: Final = 0
INTERNAL: Final = 1  # a bug: the traceback is printed
BAD_INPUT: Final = 2  # usage, a value out of range, a bad file or path
TIMEOUT: Final = 3  # spilloverctl --wait ran out of time (the change itself was made)
NOT_FOUND: Final = 4  # the SpilloverPolicy or its target Deployment does not exist
API: Final = 5  # the cluster: unreachable, forbidden, rejected; a cluster stage stopped
MISMATCH: Final = 6  # status found a mismatch / the operator refused the policy
PREFLIGHT: Final = 7  # a preflight checklist item failed
INCONCLUSIVE: Final = 8  # the verdict is inconclusive: no decision
INCOMPLETE: Final = 9  # runs of the matrix are missing: no decision from partial data
LOCKED: Final = 10  # another process holds the results directory
EXTRA_REFUSED: Final = 11  # spilloverctl: the change was made, an extra asked for was not
INTERRUPTED: Final = 130  # Ctrl-C / SIGTERM


@dataclass(frozen=True)
class ExitCode:
    code: int
    name: str
    meaning: str


TABLE: Final[tuple[ExitCode, ...]] = (
    ExitCode(
        OK,
        "ok",
        "success: spilloverctl found everything in effect; the harness reached a "
        "decision (131072, 32768, false, or the matrix's own chain values)",
    ),
    ExitCode(
        INTERNAL,
        "internal",
        "internal error: a bug (the traceback is printed); "
        "never an answer about the cluster or the verdict",
    ),
    ExitCode(
        BAD_INPUT,
        "bad-input",
        "bad input: usage, a value out of range, an invalid "
        "policy, matrix, profile or records file, an unusable path",
    ),
    ExitCode(
        TIMEOUT,
        "timeout",
        "spilloverctl --wait timed out (the change itself was "
        "made; what was still pending is printed); a fleet cluster past its "
        "--context-timeout after its change was made",
    ),
    ExitCode(NOT_FOUND, "not-found", "the SpilloverPolicy or its target Deployment does not exist"),
    ExitCode(
        API,
        "api",
        "the cluster could not be used: kubeconfig/context, unreachable, "
        "forbidden, rejected, or (a fleet cluster) not within its --context-timeout; a "
        "harness cluster stage stopped before or between runs",
    ),
    ExitCode(
        MISMATCH,
        "mismatch",
        "spilloverctl status found a mismatch or a not-ready "
        "state; --wait: the operator refused the policy",
    ),
    ExitCode(
        PREFLIGHT, "preflight", "a preflight check failed (each failure is printed with its fix)"
    ),
    ExitCode(
        INCONCLUSIVE,
        "inconclusive",
        "the verdict is inconclusive (missing data or too "
        "few valid runs; the report says which runs are needed)",
    ),
    ExitCode(
        INCOMPLETE,
        "incomplete",
        "runs of the matrix are missing from the results: no decision is taken from partial "
        "data (rerun with --resume, or judge what is there with --allow-incomplete)",
    ),
    ExitCode(
        LOCKED,
        "locked",
        "another spillover-harness process (its PID is printed) is writing the results "
        "directory; nothing was touched",
    ),
    ExitCode(
        EXTRA_REFUSED,
        "extra-refused",
        "spilloverctl: the change itself was made (kill: spillover is being turned OFF), "
        "but an extra asked for with it was refused or failed: --reason's change record, "
        "--refresh-recipe-pods, or --wait following it; the message names each and what "
        "to do",
    ),
    ExitCode(
        INTERRUPTED,
        "interrupted",
        "interrupted (Ctrl-C / SIGTERM): what was already "
        "sent or recorded stays; the harness resumes with --resume",
    ),
)


def describe(codes: tuple[int, ...] | None = None, *, title: str = "exit codes") -> str:
    """The table (or the rows a command can return) as `--help` epilog text."""
    rows = [row for row in TABLE if codes is None or row.code in codes]
    lines = [f"{title}:"]
    for row in rows:
        lines.extend(
            textwrap.wrap(
                row.meaning, width=78, initial_indent=f"  {row.code:<5}", subsequent_indent=" " * 7
            )
        )
    return "\n".join(lines)
