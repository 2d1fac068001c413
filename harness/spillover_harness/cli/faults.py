"""`spillover-harness faults` (`make faults`): plant every simulator fault switch in a
stage of its own and say, per switch, whether the check it proves caught it
(studies/faults.py)."""

from __future__ import annotations

import argparse
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spillover_operator import exit_codes

from spillover_harness.cli.common import FORMATTER, BadInput, epilog, err, load_matrix_arg
from spillover_harness.sim.faults import FAULT_SWITCHES

if TYPE_CHECKING:
    from spillover_harness.plan.matrix import Matrix
    from spillover_harness.studies.faults import MatrixKind, Outcome

CODES = (
    exit_codes.OK,
    exit_codes.INTERNAL,
    exit_codes.BAD_INPUT,
    exit_codes.MISMATCH,
    exit_codes.INTERRUPTED,
)
CHECKS_MATRIX = "faults.yaml"  # shipped with the harness: harness/matrices/
MEMORY_MATRIX = "memory-budget.yaml"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "faults",
        formatter_class=FORMATTER,
        help="prove every check can fail: plant each simulator fault, see it caught",
        description=(
            "Run one clean simulator stage per matrix, then one stage per fault switch\n"
            "(run --fault), and print one line per switch: its name, the check it proves\n"
            "and `caught` (the check read its failing value, from its passing one on the\n"
            "clean stage, and the decision changed where the check is part of it) or\n"
            "`MISSED`. Exits 6 on a miss. About 1 minute; nothing is kept unless --out\n"
            "is given."
        ),
        epilog=epilog(*CODES, extra="See docs/simulator.md §3, 'Fault switches'."),
    )
    p.add_argument(
        "--fault",
        action="append",
        choices=[f.name for f in FAULT_SWITCHES],
        default=[],
        help="only this switch (repeatable; default: every switch)",
    )
    p.add_argument(
        "--matrix",
        type=Path,
        default=None,
        help=f"the matrix of the checks' switches (default: the shipped {CHECKS_MATRIX})",
    )
    p.add_argument(
        "--memory-matrix",
        type=Path,
        default=None,
        help="the matrix of the memory switches, one whose runs fill the budget "
        f"(default: the shipped {MEMORY_MATRIX})",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="keep every stage's results here (a new or empty directory; default: a "
        "temporary directory, removed at the end)",
    )
    p.set_defaults(func=cmd_faults)


def _empty_dir(path: Path) -> Path:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BadInput(f"--out {path}: not a new or empty directory; name another")
    return path


def cmd_faults(args: argparse.Namespace) -> int:
    from spillover_harness.plan.matrix import shipped_matrix
    from spillover_harness.run.runner import StopRequest, stop_on_signals
    from spillover_harness.studies.faults import run_faults

    matrices: dict[MatrixKind, Matrix] = {
        "checks": load_matrix_arg(args.matrix or shipped_matrix(CHECKS_MATRIX)),
        "memory": load_matrix_arg(args.memory_matrix or shipped_matrix(MEMORY_MATRIX)),
    }
    stop = StopRequest()
    with tempfile.TemporaryDirectory(prefix="faults-") as tmp, stop_on_signals(stop):
        out = _empty_dir(args.out) if args.out is not None else Path(tmp)
        results = run_faults(
            matrices,
            lambda m, faults, d: _judged_stage(m, faults, d, stop),
            out,
            only=args.fault,
            cancel=stop,
            on_result=lambda r: print(r.line(), flush=True),
        )
        if stop.is_set():
            err("interrupted: the switches above were judged; run `make faults` again")
            return exit_codes.INTERRUPTED
    missed = [r.switch.name for r in results if not r.caught]
    print(f"faults: {len(results) - len(missed)} of {len(results)} caught")
    if missed:
        err(
            f"error: the checks missed {', '.join(missed)}: a check that cannot fail proves nothing"
        )
        return exit_codes.MISMATCH
    return exit_codes.OK


def _judged_stage(
    matrix: Matrix, faults: Sequence[str], out_dir: Path, stop: threading.Event
) -> Outcome:
    """A simulator stage of `matrix` with `faults` in `out_dir`, judged as `run` judges."""
    from spillover_harness.cli.outcome import judge
    from spillover_harness.stages.sim_stage import SimStageSpec, sim_stage
    from spillover_harness.studies.faults import Outcome

    spec = SimStageSpec(faults=sorted(faults), progress=False, quiet=True)
    stage = sim_stage(matrix, spec)
    result = stage.run(matrix, out_dir, cancel=stop)
    stage.write_lane(matrix, out_dir)
    verdict = judge(result.records, matrix, allow_incomplete=True, records_dir=out_dir)
    return Outcome(verdict, result.records)
