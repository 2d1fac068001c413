"""The parser of `spillover-harness` and the dispatch: each command's module adds its
own subparser; errors become exit codes of the shared table here, and only here."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import traceback
from collections.abc import Sequence
from types import FrameType
from typing import Any

from spillover_operator import exit_codes
from spillover_operator.interrupts import caused_by_interrupt

from spillover_harness.cli import (
    apply_decision,
    evaluate,
    faults,
    fixtures,
    plan,
    preflight,
    report,
    run,
    sensitivity,
    sweep,
)
from spillover_harness.cli.common import FORMATTER, BadInput, Interrupted, Parser, epilog, err
from spillover_harness.plan.matrix import MatrixError
from spillover_harness.results.records import RecordError
from spillover_harness.results.results_dir import ResultsDirError, ResultsDirLocked


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="spillover-harness",
        formatter_class=FORMATTER,
        description=(
            "Validation harness for workflow step spillover: runs the matrix of\n"
            "configurations (off, 128KiB, 32KiB) x recipes x inputs x repetitions,\n"
            "judges each configuration against `off` and decides the default (one of\n"
            "the matrix's decision values: 131072, 32768 or false for the default\n"
            "matrix). `run --stage sim` needs no cluster."
        ),
        epilog=epilog(
            *run.CODES, extra="See docs/harness.md for the results directory and resume."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in (
        run,
        evaluate,
        report,
        plan,
        preflight,
        fixtures,
        sweep,
        sensitivity,
        faults,
        apply_decision,
    ):
        command.add_parser(sub)
    return parser


def _sigterm_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # the same clean stop as Ctrl-C (a stage installs its own)


def dispatch(argv: Sequence[str]) -> int:
    """Parse `argv`, run the command, and map what it raised to an exit code."""
    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        return _dispatch(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _dispatch(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    args.invoked = shlex.join(["spillover-harness", *argv])
    func: Any = args.func
    try:
        code: int = func(args)
        return code
    except ResultsDirLocked as exc:
        err(f"error: {exc}")
        return exit_codes.LOCKED
    except (BadInput, ResultsDirError) as exc:
        err(f"error: {exc}")
        return exit_codes.BAD_INPUT
    except MatrixError as exc:
        err(f"error: bad matrix: {exc}")
        return exit_codes.BAD_INPUT
    except RecordError as exc:
        err(f"error: bad records file: {exc}")
        return exit_codes.BAD_INPUT
    except Interrupted as exc:
        err(str(exc))
        return exit_codes.INTERRUPTED
    except KeyboardInterrupt:  # outside the run loop (which handles SIGINT itself)
        err("interrupted")
        return exit_codes.INTERRUPTED
    except BrokenPipeError:  # `... | head`: not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the exit-time flush does not fail again
        return exit_codes.OK
    except Exception as exc:
        if caused_by_interrupt(exc):  # Ctrl-C while a lazily imported class was built
            err("interrupted")
            return exit_codes.INTERRUPTED
        err("internal error (a bug in spillover-harness; please report it):")
        traceback.print_exc()
        return exit_codes.INTERNAL
