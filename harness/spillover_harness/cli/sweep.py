"""`spillover-harness sweep`: the matrix's recipes and inputs at many thresholds, on the
simulator, each point judged against the baseline (studies/sweep.py)."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from spillover_operator import exit_codes
from spillover_operator.domain.model import BUDGET, THRESHOLD

from spillover_harness.cli.common import (
    FORMATTER,
    STUDY_CODES,
    BadInput,
    Interrupted,
    add_study_args,
    epilog,
    err,
    load_matrix_arg,
    stage_beside,
    study_resume_argv,
)

CODES = STUDY_CODES

DEFAULT_THRESHOLDS = "8192,16384,32768,65536,131072,262144"


def int_list(text: str) -> list[int]:
    """`8192,16384,...` (spaces allowed); each a decimal integer."""
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or len(part) > 12:
            raise argparse.ArgumentTypeError(
                f"not a comma-separated list of byte counts: {part!r} in {text!r}"
            )
        values.append(int(part))
    return values


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "sweep",
        formatter_class=FORMATTER,
        help="judge many thresholds (and budgets) against off on the simulator",
        description=(
            "Run the matrix's recipes and inputs at each threshold (x each budget) and\n"
            "at its baseline (off) on the embedded simulator, judge every point on the\n"
            "five criteria against the baseline, and write OUT/sweep.md (per point: the\n"
            "criteria, the token ratio per cell, the success rate; the passing range and\n"
            "the lowest-token passing point), OUT/sweep.json, OUT/plots/sweep.png (input\n"
            "tokens and success rate against the threshold, log scale) and the full\n"
            "evidence under OUT/evidence/. Records go to OUT/runs.jsonl as in `run`:\n"
            "Ctrl-C stops cleanly and the same command with --resume continues."
        ),
        epilog=epilog(*CODES, extra="See docs/harness.md, 'Studies'."),
    )
    p.add_argument(
        "--thresholds",
        type=int_list,
        default=int_list(DEFAULT_THRESHOLDS),
        metavar="N,N,...",
        help=f"thresholds in bytes, {THRESHOLD.low}..{THRESHOLD.high} "
        f"(default {DEFAULT_THRESHOLDS})",
    )
    p.add_argument(
        "--budgets",
        type=int_list,
        default=[],
        metavar="N,N,...",
        help=f"budgets in bytes, {BUDGET.low}..{BUDGET.high}: every threshold at every budget "
        "(default: the platform's default budget only)",
    )
    add_study_args(p, what="sweep")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)


def resume_command(args: argparse.Namespace) -> str:
    argv = ["spillover-harness", "sweep", "--thresholds", ",".join(map(str, args.thresholds))]
    if args.budgets:
        argv += ["--budgets", ",".join(map(str, args.budgets))]
    argv += study_resume_argv(args)
    if args.no_progress:
        argv.append("--no-progress")
    return shlex.join([*argv, "--resume"])


def cmd_sweep(args: argparse.Namespace) -> int:
    from spillover_harness.results.results_dir import StageDir, hold_results_dir
    from spillover_harness.run.runner import StopRequest, stop_on_signals
    from spillover_harness.studies.sweep import check_points, judge_sweep, run_sweep, sweep_matrix
    from spillover_harness.studies.sweep_report import write_sweep_report

    problems = check_points(args.thresholds, args.budgets)
    if problems:
        raise BadInput("\n  ".join(problems))
    matrix = sweep_matrix(load_matrix_arg(args.matrix), args.thresholds, args.budgets)
    again = resume_command(args)
    stop = StopRequest()
    with hold_results_dir(args.out, command=args.invoked), stop_on_signals(stop):
        records, interrupted, planned = run_sweep(
            matrix,
            args.out,
            resume=args.resume,
            concurrency=args.concurrency,
            progress=not args.no_progress,
            resume_hint=again,
            cancel=stop,
        )
        if interrupted:
            err(
                f"interrupted: {len(records)} of {planned} runs recorded in "
                f"{args.out / 'runs.jsonl'}. To finish the sweep: {again}"
            )
            return exit_codes.INTERRUPTED
        try:
            verdict, result = judge_sweep(records, matrix)
            paths = write_sweep_report(
                result,
                verdict,
                records,
                matrix,
                args.out,
                command=args.invoked,
                stage=stage_beside(StageDir(args.out).records_file),
            )
        except KeyboardInterrupt:
            raise Interrupted(
                f"interrupted while judging the sweep; the runs are recorded. To write the "
                f"report: {again}"
            ) from None
    best = result.best
    print(f"sweep: {len(result.points)} points, {len(records)} runs")
    for point in result.points:
        failed = [k for k, v in point.criteria.items() if v != "pass"]
        print(f"  {point.name}: {point.verdict}" + (f" ({', '.join(failed)})" if failed else ""))
    print(f"passing range: {result.passing_range()}")
    print(f"lowest-token passing point: {best.name if best is not None else 'none'}")
    print(f"report: {paths.report_md}")
    return exit_codes.OK
