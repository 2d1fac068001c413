"""`spillover-harness fixtures export`: the recipes' inputs as files."""

from __future__ import annotations

import argparse
from typing import Any

from spillover_operator import exit_codes

from spillover_harness.cli.common import FORMATTER, BadInput, bounded_int, dir_path, epilog
from spillover_harness.plan.matrix import SEED_MAX

CODES = (exit_codes.OK, exit_codes.INTERNAL, exit_codes.BAD_INPUT, exit_codes.INTERRUPTED)


def add_parser(sub: Any) -> None:
    fx = sub.add_parser(
        "fixtures",
        formatter_class=FORMATTER,
        help="the generated inputs of the recipes",
        description="Work with the deterministic fixtures (the recipes' inputs).",
    )
    fx_sub = fx.add_subparsers(dest="fixtures_command", metavar="ACTION", required=True)
    exp = fx_sub.add_parser(
        "export",
        formatter_class=FORMATTER,
        help="write the fixtures as files",
        description=(
            "Write the fixtures (code-review changes, the summarize document) as files\n"
            "under DIR, so the same inputs can be loaded into the real recipes. The\n"
            "same seed always gives the same files. The inputs built only when a matrix\n"
            "names them (code-review/budget-16MiB, ~18 MB) are written with --all."
        ),
        epilog=epilog(*CODES),
    )
    exp.add_argument("dir", type=dir_path, metavar="DIR", help="output directory (created)")
    exp.add_argument(
        "--seed",
        type=bounded_int(0, SEED_MAX),
        default=None,
        metavar="N",
        help="fixture seed (default: the default matrix's seed, i.e. the simulator's inputs)",
    )
    exp.add_argument(
        "--all",
        action="store_true",
        help="also the inputs built only when a matrix names them "
        "(code-review/budget-16MiB, ~18 MB: matrices/memory-budget.yaml)",
    )
    exp.set_defaults(func=cmd_fixtures_export)


def cmd_fixtures_export(args: argparse.Namespace) -> int:
    from spillover_harness.fixtures import build_fixtures, default_fixture_seed, export_fixtures

    seed = args.seed if args.seed is not None else default_fixture_seed()
    out = args.dir
    if out.exists() and not out.is_dir():
        raise BadInput(f"{out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        paths = export_fixtures(build_fixtures(seed), out, lazy=args.all)
    except OSError as exc:
        raise BadInput(f"{out}: cannot write the fixtures: {exc.strerror or exc}") from None
    print(f"wrote {len(paths)} fixture files under {out} (seed {seed})")
    return exit_codes.OK
