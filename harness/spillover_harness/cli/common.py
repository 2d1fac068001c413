"""What the commands share: the error types the app maps to exit codes, the argument
helpers, and loading the matrix and the records."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from spillover_operator import exit_codes

from spillover_harness.matrix import Matrix, MatrixError, load_matrix
from spillover_harness.records import RecordError, RunRecord, read_records


class BadInput(Exception):
    """A user mistake: printed as `error: ...`, exit BAD_INPUT."""


class Interrupted(Exception):
    """Ctrl-C / SIGTERM during a step that cannot stop gracefully (evaluating, writing
    the report): the message says what was and was not done. Exit INTERRUPTED."""


class Parser(argparse.ArgumentParser):
    """Usage mistakes exit BAD_INPUT (argparse's own 2 is the table's BAD_INPUT too)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(exit_codes.BAD_INPUT, f"{self.prog}: error: {message}\n")


FORMATTER = argparse.RawDescriptionHelpFormatter


def epilog(*codes: int, extra: str = "") -> str:
    """The exit codes a command can return, from the shared table."""
    text = exit_codes.describe(codes=tuple(sorted(codes)))
    return text + (f"\n\n{extra}" if extra else "")


def err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# arguments


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {value})")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 (got {text})")
    return value


def dir_path(text: str) -> Path:
    """A directory to write: never the empty string (Path('') is the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; name a directory (e.g. results/sim)")
    return Path(text)


def add_matrix_arg(p: argparse.ArgumentParser, *, default_help: str | None = None) -> None:
    p.add_argument(
        "--matrix",
        type=Path,
        default=None,
        metavar="FILE",
        help=default_help or "matrix YAML (default: the packaged spillover-default.yaml)",
    )


# The exit codes a simulator study (sweep, sensitivity) can end with.
STUDY_CODES = (
    exit_codes.OK,
    exit_codes.INTERNAL,
    exit_codes.BAD_INPUT,
    exit_codes.LOCKED,
    exit_codes.INTERRUPTED,
)


def add_study_args(p: argparse.ArgumentParser, *, what: str) -> None:
    """What every simulator study takes after its own options: the matrix, the
    results directory, --resume (of the `what` recorded there) and --concurrency."""
    add_matrix_arg(p)
    p.add_argument(
        "--out", required=True, type=dir_path, metavar="DIR", help="results directory (created)"
    )
    p.add_argument("--resume", action="store_true", help=f"continue the {what} recorded in --out")
    p.add_argument(
        "--concurrency", type=positive_int, metavar="N", help="runs at once (default: the matrix's)"
    )


def study_resume_argv(args: argparse.Namespace) -> list[str]:
    """The `add_study_args` values as a resume command repeats them (without --resume)."""
    argv: list[str] = []
    if args.matrix:
        argv += ["--matrix", str(args.matrix)]
    argv += ["--out", str(args.out)]
    if args.concurrency:
        argv += ["--concurrency", str(args.concurrency)]
    return argv


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profile",
        default=None,
        metavar="FILE",
        help="cluster profile YAML, or the shipped 'minikube' / 'dev' (docs/cluster-profile.md)",
    )
    p.add_argument("--kubeconfig", default=None, metavar="FILE", help="default: $KUBECONFIG")
    p.add_argument(
        "--context",
        default=None,
        metavar="NAME",
        help="kube context (default: the profile's kube_context); for minikube, the "
        "Minikube profile name",
    )


def add_records_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", required=True, type=Path, metavar="FILE", help="a runs.jsonl file")
    add_matrix_arg(
        p,
        default_help="the matrix the records were made with (default: the one stored in "
        "stage.json next to the records file, else the packaged spillover-default.yaml)",
    )
    p.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="judge the records that are there even when runs of the matrix are missing "
        "(the report says so first); without it a stage with runs missing is not decided",
    )


# ---------------------------------------------------------------------------------------
# loading


def load_matrix_arg(path: Path | None) -> Matrix:
    try:
        return load_matrix(path)
    except MatrixError as exc:
        raise BadInput(f"bad matrix: {exc}") from None


def load_records(path: Path) -> list[RunRecord]:
    if path.is_dir():
        raise BadInput(f"{path}: is a directory; pass its runs.jsonl")
    try:
        return read_records(path)
    except RecordError as exc:
        raise BadInput(f"bad records file: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read the records file: {exc}") from None


def check_records_match_matrix(records: Sequence[RunRecord], matrix: Matrix) -> None:
    """Records of configurations or cells the matrix does not know mean the wrong matrix."""
    configs = {c.name for c in matrix.configurations}
    unknown_configs = sorted({r.config for r in records} - configs)
    unknown_cells = sorted(
        {f"{r.recipe}/{r.input}" for r in records if matrix.size_class(r.recipe, r.input) is None}
    )
    problems = []
    if unknown_configs:
        problems.append(f"configurations not in the matrix: {', '.join(unknown_configs)}")
    if unknown_cells:
        problems.append(f"recipe/input not in the matrix: {', '.join(unknown_cells)}")
    if problems:
        raise BadInput(
            f"the records do not fit matrix '{matrix.name}' ({'; '.join(problems)}); "
            f"pass the matrix they were made with (--matrix FILE)"
        )
    stages = sorted({r.stage for r in records})
    if len(stages) > 1:
        raise BadInput(
            f"the records mix stages ({', '.join(stages)}); evaluate one stage at a time"
        )


def expected_matrix(records: Path, matrix_arg: Path | None) -> Matrix:
    """The matrix the records are judged against: `--matrix`, else the one stored in the
    stage.json next to the records file (the matrix that made them), else the default."""
    from spillover_harness.results_dir import (
        ResultsDirError,
        matrix_hash,
        read_stage_file,
        stored_matrix,
    )

    try:
        stage_file = read_stage_file(records.parent)
        stored = (
            stored_matrix(stage_file, source=str(records.parent / "stage.json"))
            if stage_file is not None
            else None
        )
    except ResultsDirError as exc:
        if matrix_arg is None:
            raise BadInput(
                f"{exc}; pass the matrix the records were made with (--matrix)"
            ) from None
        stored = None
    if matrix_arg is None:
        return stored if stored is not None else load_matrix_arg(None)
    matrix = load_matrix_arg(matrix_arg)
    if stored is not None and matrix_hash(stored) != matrix_hash(matrix):
        err(
            f"note: judging with --matrix {matrix_arg}, not the matrix that made the records "
            f"(stored in {records.parent / 'stage.json'})"
        )
    return matrix
