"""`spillover-harness report`: write report.md, verdict.json and the plots of a
records file. The output directory is held like a stage's (one writer at a time)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from spillover_operator import exit_codes

from spillover_harness.cli.common import (
    FORMATTER,
    BadInput,
    Interrupted,
    add_records_args,
    dir_path,
    epilog,
    expected_matrix,
    load_records,
    stage_beside,
)
from spillover_harness.cli.outcome import judge, print_outcome, write_report
from spillover_harness.input_file import shown

CODES = (
    exit_codes.OK,
    exit_codes.INTERNAL,
    exit_codes.BAD_INPUT,
    exit_codes.INCONCLUSIVE,
    exit_codes.INCOMPLETE,
    exit_codes.LOCKED,
    exit_codes.INTERRUPTED,
)


def add_parser(sub: Any) -> None:
    rep = sub.add_parser(
        "report",
        formatter_class=FORMATTER,
        help="write report.md, verdict.json and plots for a records file",
        description=(
            "Evaluate a runs.jsonl file and write DIR/report.md (ready to paste into a\n"
            "pull request), DIR/verdict.json and the PNG plots. The matrix is the one\n"
            "that made the records (stored in stage.json next to them) unless --matrix\n"
            "says otherwise. A DIR another spillover-harness process is writing is\n"
            "refused (exit 10)."
        ),
        epilog=epilog(*CODES),
    )
    add_records_args(rep)
    rep.add_argument("--out", required=True, type=dir_path, metavar="DIR", help="output directory")
    rep.set_defaults(func=cmd_report)


def _refuse_another_stages_dir(out: Path, records: Path) -> None:
    """A directory holding a stage (its stage.json) keeps the verdict of its own
    records: a report of other records written there would replace it."""
    from spillover_harness.results_dir import STAGE_FILE

    try:
        holds_stage = (out / STAGE_FILE).exists()
        same = holds_stage and out.resolve() == records.parent.resolve()
    except OSError as exc:
        raise BadInput(f"{shown(out)}: cannot use it as --out: {exc.strerror or exc}") from None
    if holds_stage and not same:
        raise BadInput(
            f"{shown(out)} holds another stage's results ({STAGE_FILE}); its report and "
            f"verdict belong to its own runs.jsonl, not to {shown(records)}: pass a new --out "
            "directory (or the records file's own directory)"
        )


def cmd_report(args: argparse.Namespace) -> int:
    from spillover_harness.results_dir import hold_results_dir

    matrix = expected_matrix(args.records, args.matrix)
    records = load_records(args.records, matrix)
    stage = stage_beside(args.records)  # its faults and simulated platform, in the report
    _refuse_another_stages_dir(args.out, args.records)
    with hold_results_dir(args.out, command=args.invoked):
        try:
            verdict = judge(
                records,
                matrix,
                allow_incomplete=args.allow_incomplete,
                records_dir=args.records.parent,
            )
        except KeyboardInterrupt:
            raise Interrupted(
                f"interrupted during the evaluation: the report in {args.out} was not written"
            ) from None
        report_md = write_report(
            verdict,
            records,
            matrix,
            args.out,
            records_path=args.records,
            stage=stage,
            rerun=args.invoked,
        )
    return print_outcome(verdict, matrix, report_md=report_md)
