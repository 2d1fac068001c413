"""What the commands share: the error types the app maps to exit codes, the argument
helpers, and loading the matrix and the records."""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from spillover_operator import exit_codes
from spillover_operator.domain.quoting import SHORT, cut, shorten

from spillover_harness.input_file import shown
from spillover_harness.plan.matrix import CONCURRENCY_MAX, Matrix, MatrixError, load_matrix
from spillover_harness.results.records import RecordError, RunRecord, read_numbered_records

if TYPE_CHECKING:
    from spillover_harness.results.results_dir import StageFile


class BadInput(Exception):
    """A user mistake: printed as `error: ...`, exit BAD_INPUT."""


class Interrupted(Exception):
    """Ctrl-C / SIGTERM during a step that cannot stop gracefully (evaluating, writing
    the report): the message says what was and was not done. Exit INTERRUPTED."""


class Parser(argparse.ArgumentParser):
    """Usage mistakes exit BAD_INPUT (argparse's own 2 is the table's BAD_INPUT too)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        # argparse quotes the value it refuses ('...'): cut a long one
        message = _QUOTED.sub(lambda m: cut(m.group(0)), message)
        self.exit(exit_codes.BAD_INPUT, f"{self.prog}: error: {bounded(message)}\n")


FORMATTER = argparse.RawDescriptionHelpFormatter

_QUOTED = re.compile(r"'([^'\n]{" + str(SHORT + 1) + r",})'")
_LINE_MAX = 2000


def bounded(text: str) -> str:
    """A message with no line longer than _LINE_MAX: the last guard against echoing a
    1 MB bad value back (each message cuts the values it quotes itself)."""
    return "\n".join(
        line if len(line) <= _LINE_MAX else f"{line[: _LINE_MAX - 200]}…{line[-199:]}"
        for line in text.split("\n")
    )


def epilog(*codes: int, extra: str = "") -> str:
    """The exit codes a command can return, from the shared table."""
    text = exit_codes.describe(codes=tuple(sorted(codes)))
    return text + (f"\n\n{extra}" if extra else "")


def err(text: str) -> None:
    print(bounded(text), file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# arguments

_INT_CHARS = 12  # longer than any count or seed an option takes: refused before int()


def _int(text: str) -> int:
    stripped = text.strip()
    if len(stripped) > _INT_CHARS or not re.fullmatch(r"[+-]?[0-9]+", stripped):
        raise argparse.ArgumentTypeError(f"not an integer: {shorten(text)}")
    return int(stripped)


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argument type: a decimal integer from `low` to `high`."""

    def parse(text: str) -> int:
        value = _int(text)
        if value < low:
            raise argparse.ArgumentTypeError(
                f"must be >= {low} (got {value}); allowed: {low}..{high}"
            )
        if value > high:
            raise argparse.ArgumentTypeError(
                f"must be <= {high} (got {value}); allowed: {low}..{high}"
            )
        return value

    return parse


def positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {value})")
    return value


# Runs at once: the matrix's own bound (`Matrix.concurrency`).
concurrency = bounded_int(1, CONCURRENCY_MAX)

TIMEOUT_MAX_S = 24 * 3600.0


def whole_number(flag: str, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number 1..`high` (digits only, at most 6), the error
    naming `flag` (`bounded_int` is the same for options whose message names no flag)."""

    def parse(text: str) -> int:
        if not text.strip().isdigit() or len(text) > 6 or not 1 <= int(text) <= high:
            raise argparse.ArgumentTypeError(
                f"{flag} takes a whole number from 1 to {high}, got {text[:20]!r}"
            )
        return int(text)

    return parse


def positive_float(text: str) -> float:
    """A finite number > 0, at most a day (a timeout in seconds)."""
    try:
        value = float(text) if len(text) <= 40 else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(
            f"not a finite number: {shorten(text)}; allowed: > 0 and at most {TIMEOUT_MAX_S:g}"
        )
    if not 0 < value <= TIMEOUT_MAX_S:
        raise argparse.ArgumentTypeError(
            f"{text} is out of range; allowed: > 0 and at most {TIMEOUT_MAX_S:g}"
        )
    return value


_PATH_MAX = 4096  # bytes, Linux's PATH_MAX
_NAME_MAX = 255  # bytes of one path component


def _checked_path(text: str, what: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError(f"an empty path; name a {what}")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"a path with a NUL byte: {shorten(text)}")
    size = len(text.encode("utf-8", "surrogateescape"))
    longest = max(len(part.encode("utf-8", "surrogateescape")) for part in text.split("/"))
    if size > _PATH_MAX or longest > _NAME_MAX:
        raise argparse.ArgumentTypeError(
            f"the path {shorten(text)} is too long ({size} bytes, longest name {longest}); "
            f"allowed: {_PATH_MAX} bytes, {_NAME_MAX} per name: pass a shorter path"
        )
    return Path(text)


def dir_path(text: str) -> Path:
    """A directory to write: never the empty string (Path('') is the current directory),
    never longer than the file system takes."""
    return _checked_path(text, "directory (e.g. results/sim)")


def file_path(text: str) -> Path:
    """A file to read: not empty, not longer than the file system takes."""
    return _checked_path(text, "file")


def profile_arg(text: str) -> str:
    """A shipped profile's name or a profile file (checked like `file_path`)."""
    _checked_path(text, "profile (minikube, dev, local or a file)")
    return text


def kubectl_arg(text: str) -> str:
    """A kubectl to run: a name looked up on PATH or a path (checked like `file_path`)."""
    _checked_path(text, "kubectl binary (e.g. kubectl, or its full path)")
    return text


def add_matrix_arg(p: argparse.ArgumentParser, *, default_help: str | None = None) -> None:
    p.add_argument(
        "--matrix",
        type=file_path,
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
        "--concurrency",
        type=concurrency,
        metavar="N",
        help=f"runs at once, 1..{CONCURRENCY_MAX} (default: the matrix's)",
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
        type=profile_arg,
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
    p.add_argument(
        "--kubectl",
        type=kubectl_arg,
        default=None,
        metavar="FILE",
        help="the kubectl that runs `port-forward` for run.access: port-forward (default: "
        "the profile's `kubectl` key, itself kubectl on PATH by default); the make targets "
        "pass the one `make kubectl` builds",
    )


def add_records_args(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    """--records, --matrix, --allow-incomplete (`required`: False where another option
    can replace --records, the command then checks it)."""
    p.add_argument(
        "--records", required=required, type=file_path, metavar="FILE", help="a runs.jsonl file"
    )
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


def load_records(path: Path, matrix: Matrix) -> list[RunRecord]:
    """The records of `path`, checked as a whole before anything counts them: against
    `matrix` (`records_check`: configurations, cells, repetitions, run ids, two
    different records of one run, one stage) and against the stage.json beside them."""
    from spillover_harness.results.records_check import (
        check_against_matrix,
        check_against_stage_file,
    )
    from spillover_harness.results.results_dir import ResultsDirError

    if path.is_dir():
        raise BadInput(f"{shown(path)}: is a directory; pass its runs.jsonl")
    try:
        numbered = read_numbered_records(path)
    except RecordError as exc:
        raise BadInput(f"bad records file: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{shown(path)}: cannot read the records file: {exc}") from None
    records = [record for _, record in numbered]
    check_records_match_matrix(records, matrix)
    stage_file = stage_beside(path)
    try:
        check_against_matrix(numbered, matrix, path)
        if stage_file is not None:
            check_against_stage_file(numbered, stage_file, path)
    except (RecordError, ResultsDirError) as exc:
        raise BadInput(f"bad records file: {exc}") from None
    return records


def stage_beside(records: Path) -> StageFile | None:
    """The stage.json beside a records file (None when there is none): the matrix that
    made the records, the stage, its faults and whether the platform was simulated. A
    verdict or report that cannot tell must not be written (it would judge the wrong
    matrix, or drop the faults note or the disclaimer), so a stage.json that cannot be
    read as a stage is refused here, for every command that reads records."""
    from spillover_harness.results.results_dir import ReadBackError, StageDir

    try:
        return StageDir(records.parent).read_stage()
    except ReadBackError as exc:
        raise BadInput(
            f"{shown(exc.path)}: cannot read the stage beside the records ({cut(exc.detail)}), "
            "so which matrix made them, and whether faults were injected or the platform was "
            "simulated, cannot be told; restore the stage.json the stage wrote, or run the "
            "stage again into a new directory"
        ) from None


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
    from spillover_harness.results.results_dir import (
        ResultsDirError,
        StageDir,
        matrix_hash,
        stored_matrix,
    )

    stage_path = StageDir(records.parent).stage_file
    stage_file = stage_beside(records)
    try:
        stored = (
            stored_matrix(stage_file, source=str(stage_path)) if stage_file is not None else None
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
            f"(stored in {stage_path})"
        )
    elif stored is not None and stored.extension:
        # The same matrix: the stage's added repetitions (run --until-stable) belong to it.
        matrix = matrix.model_copy(update={"extension": dict(stored.extension)})
    return matrix
