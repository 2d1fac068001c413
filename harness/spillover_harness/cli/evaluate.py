"""`spillover-harness evaluate`: print the verdict of a records file."""

from __future__ import annotations

import argparse
import json
from typing import Any

from spillover_operator import exit_codes

from spillover_harness.cli.common import (
    FORMATTER,
    Interrupted,
    add_records_args,
    epilog,
    expected_matrix,
    load_records,
    stage_beside,
)
from spillover_harness.cli.outcome import judge, outcome_code

CODES = (
    exit_codes.OK,
    exit_codes.INTERNAL,
    exit_codes.BAD_INPUT,
    exit_codes.INCONCLUSIVE,
    exit_codes.INCOMPLETE,
    exit_codes.INTERRUPTED,
)


def add_parser(sub: Any) -> None:
    ev = sub.add_parser(
        "evaluate",
        formatter_class=FORMATTER,
        help="print the verdict of a records file",
        description=(
            "Judge the records of a runs.jsonl file against the matrix's acceptance\n"
            "criteria and print the verdict. The matrix is the one that made the\n"
            "records (stored in stage.json next to them) unless --matrix says\n"
            "otherwise. --format json prints exactly one JSON object: `decision`\n"
            '(one of the matrix\'s decision values, e.g. "131072", "32768", "false", or\n'
            '"inconclusive") and `configs`, keyed by configuration, each with `verdict`\n'
            "and `criteria` (success_rate, iteration_limit, input_tokens,\n"
            "summary_quality, no_leak), each with `status` and its evidence. A bad line\n"
            "is named (file:line)."
        ),
        epilog=epilog(*CODES),
    )
    add_records_args(ev)
    ev.add_argument(
        "--format",
        choices=("md", "json"),
        default="md",
        help="md: the report's Markdown (default); json: one JSON object",
    )
    ev.set_defaults(func=cmd_evaluate)


def cmd_evaluate(args: argparse.Namespace) -> int:
    matrix = expected_matrix(args.records, args.matrix)
    records = load_records(args.records, matrix)
    # the report's notes (faults, simulated platform) come from the stage beside them
    stage = stage_beside(args.records) if args.format == "md" else None
    try:
        verdict = judge(
            records,
            matrix,
            allow_incomplete=args.allow_incomplete,
            records_dir=args.records.parent,
        )
        if args.format == "json":
            body = json.dumps(verdict.to_json(), indent=2, sort_keys=False) + "\n"
        else:
            from spillover_harness.report.report import render_markdown

            body = render_markdown(
                verdict,
                records,
                matrix,
                simulated_platform=stage is not None and stage.simulated_platform,
                faults=stage.driver.faults if stage is not None else (),
                provenance=stage.provenance if stage is not None else None,
                rounds=stage.rounds if stage is not None else (),
            )
    except KeyboardInterrupt:
        raise Interrupted("interrupted during the evaluation: no verdict was printed") from None
    print(body, end="")
    return outcome_code(verdict, matrix)
