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
            "refused (exit 10).\n"
            "\n"
            "report --compare A B prints two stage directories side by side instead\n"
            "(Markdown on stdout, nothing written): each one's decision, reproducibility,\n"
            "per-criterion status and key figures per configuration, read from the\n"
            "stage.json and verdict.json each stage wrote; e.g. Stage 1 against Stage 2:\n"
            "  spillover-harness report --compare results/minikube results/dev\n"
            "A directory that holds no stage (no stage.json or verdict.json) is refused\n"
            "(exit 2)."
        ),
        epilog=epilog(*CODES),
    )
    add_records_args(rep, required=False)
    rep.add_argument("--out", type=dir_path, metavar="DIR", help="output directory")
    rep.add_argument(
        "--compare",
        nargs=2,
        type=dir_path,
        metavar=("A", "B"),
        default=None,
        help="print the stages in directories A and B side by side (no --records/--out)",
    )
    rep.set_defaults(func=cmd_report)


def _refuse_another_stages_dir(out: Path, records: Path) -> None:
    """A directory holding a stage (its stage.json) keeps the verdict of its own
    records: a report of other records written there would replace it."""
    from spillover_harness.results.results_dir import STAGE_FILE, StageDir

    try:
        holds_stage = StageDir(out).stage_file.exists()
        same = holds_stage and out.resolve() == records.parent.resolve()
    except OSError as exc:
        raise BadInput(f"{shown(out)}: cannot use it as --out: {exc.strerror or exc}") from None
    if holds_stage and not same:
        raise BadInput(
            f"{shown(out)} holds another stage's results ({STAGE_FILE}); its report and "
            f"verdict belong to its own runs.jsonl, not to {shown(records)}: pass a new --out "
            "directory (or the records file's own directory)"
        )


def cmd_compare(a: Path, b: Path) -> int:
    """`report --compare A B`: the two stages side by side, on stdout."""
    from spillover_harness.report.compare import read_compared, render_comparison
    from spillover_harness.results.results_dir import ReadBackError

    sides = []
    for directory in (a, b):
        try:
            sides.append(read_compared(directory))
        except ReadBackError as exc:
            raise BadInput(
                f"--compare: {shown(directory)} is not a stage directory to compare "
                f"({shown(exc.path)}: {exc.detail}); pass a directory a stage ran into "
                "(`spillover-harness run --out DIR`, e.g. results/minikube), with its "
                "report written"
            ) from None
    print(render_comparison(sides[0], sides[1]), end="")
    return exit_codes.OK


def cmd_report(args: argparse.Namespace) -> int:
    from spillover_harness.results.results_dir import hold_results_dir

    if args.compare is not None:
        extra = [
            flag
            for flag, given in (
                ("--records", args.records is not None),
                ("--out", args.out is not None),
                ("--matrix", args.matrix is not None),
                ("--allow-incomplete", args.allow_incomplete),
            )
            if given
        ]
        if extra:
            raise BadInput(
                f"--compare A B reads two stage directories and writes nothing: drop "
                f"{', '.join(extra)}"
            )
        return cmd_compare(*args.compare)
    if args.records is None or args.out is None:
        raise BadInput(
            "report needs --records FILE and --out DIR (or --compare A B to put two stages "
            "side by side)"
        )

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
