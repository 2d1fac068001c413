"""A records file checked against the matrix it is evaluated with (issue 12 item 5).

The schema (`records.RunRecord`) checks each line alone; this checks the
file as a whole against the matrix, before the evaluator counts anything,
and refuses with the file and the line numbers:

- a configuration, recipe or input the matrix does not have;
- a repetition outside 1..N, N the matrix's repetitions for the record's stage;
- a run_id that does not match the record's identity (the runner derives it
  from stage, configuration, recipe, input and repetition: `records.run_id_for`),
  e.g. a `config` edited after the fact;
- two different records of the same run (same stage, configuration, recipe,
  input and repetition): which one is right cannot be known;
- records of several stages (a verdict is for one stage);
- (`check_against_stage_file`) records that contradict the stage.json beside them:
  another stage, or a repetition beyond the matrix stored there.

The documented rule for duplicates: a record identical to one before it (the
same line twice) is not refused; the evaluator counts the run once and says
so in the verdict's warnings.

Errors are `records.RecordError`; the CLI maps them to its exit code for bad
input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.records import (
    RecordError,
    RunKey,
    RunRecord,
    read_numbered_records,
    run_id_for,
)
from spillover_harness.results.results_dir import STAGE_FILE, StageDir, StageFile

MAX_LISTED = 3  # problems listed in the one-line message; the rest are counted

NumberedRecord = tuple[int, RunRecord]


def _lines(numbers: Sequence[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:10])
    more = f" and {len(numbers) - 10} more" if len(numbers) > 10 else ""
    return f"line{'s' if len(numbers) > 1 else ''} {shown}{more}"


def _stages(records: Sequence[NumberedRecord], path: Path | str) -> None:
    by_stage: dict[str, list[int]] = {}
    for lineno, r in records:
        by_stage.setdefault(r.stage, []).append(lineno)
    if len(by_stage) > 1:
        detail = "; ".join(
            f"{stage} on {_lines(lines)}" for stage, lines in sorted(by_stage.items())
        )
        raise RecordError(
            f"{path}: the records mix stages ({', '.join(sorted(by_stage))}: {detail}); "
            "a verdict is for one stage: keep one stage per records file"
        )


def _problem(r: RunRecord, matrix: Matrix, configs: list[str], cells: set[tuple[str, str]]) -> str:
    """What is wrong with one record against the matrix ('' when nothing is)."""
    if r.config not in configs:
        return (
            f"configuration {r.config!r} is not in matrix '{matrix.name}' "
            f"(known: {', '.join(configs)})"
        )
    if (r.recipe, r.input) not in cells:
        known = ", ".join(f"{rc}/{i}" for rc, i in sorted(cells))
        return (
            f"recipe/input {r.recipe}/{r.input} is not in matrix '{matrix.name}' (known: {known})"
        )
    reps = matrix.repetitions_for(r.stage, r.recipe, r.input)
    if r.repetition > reps:
        return (
            f"repetition {r.repetition} is outside the matrix's {reps} repetition(s) of "
            f"stage {r.stage} (1..{reps})"
        )
    expected = run_id_for(r.key)
    if r.run_id != expected:
        return (
            f"run_id {r.run_id!r} does not match the record's stage/config/recipe/input/"
            f"repetition ({r.stage}/{r.config}/{r.recipe}/{r.input} r{r.repetition}, whose "
            f"run_id is {expected!r}): the record was edited or belongs to another run"
        )
    return ""


def check_against_matrix(
    records: Sequence[NumberedRecord], matrix: Matrix, path: Path | str
) -> None:
    """Refuse (RecordError naming `path` and the lines) records that do not fit `matrix`.

    `records` are (line number, record) pairs as `records.read_numbered_records`
    returns them. Identical duplicates pass (the evaluator counts them once).
    """
    _stages(records, path)
    configs = [c.name for c in matrix.configurations]
    cells = {(r.name, i.name) for r, i in matrix.cells()}
    problems: list[str] = []
    first_of: dict[RunKey, NumberedRecord] = {}
    for lineno, r in records:
        problem = _problem(r, matrix, configs, cells)
        if problem:
            problems.append(f"line {lineno}: {problem}")
            continue
        seen = first_of.get(r.key)
        if seen is None:
            first_of[r.key] = (lineno, r)
        elif seen[1] != r:
            fields = sorted(
                k for k, v in r.model_dump().items() if seen[1].model_dump().get(k) != v
            )
            problems.append(
                f"lines {seen[0]} and {lineno}: two different records of the same run "
                f"({r.run_id}; they differ in {', '.join(fields)}): keep the right one"
            )
    if problems:
        listed = problems[:MAX_LISTED]
        more = len(problems) - len(listed)
        tail = f" (and {more} more)" if more else ""
        raise RecordError(
            f"{path}: {len(problems)} record(s) do not fit matrix '{matrix.name}': "
            + "; ".join(listed)
            + tail
            + ". Fix the records file (keep one record per run, as the stage wrote it), or "
            "evaluate it with the matrix its stage ran with"
        )


def check_against_stage_file(
    records: Sequence[NumberedRecord], stage_file: StageFile, path: Path | str
) -> None:
    """Refuse records that contradict the stage.json beside them: another stage than
    the one it names, or a repetition beyond its stored matrix's (the stage that made
    the directory did not make them)."""
    stage = stage_file.stage
    source = StageDir(Path(path).parent).stage_file if isinstance(path, Path) else STAGE_FILE
    if stage is not None:
        other = [(n, r) for n, r in records if r.stage != stage]
        if other:
            n, r = other[0]
            raise RecordError(
                f"{path}: line {n}: a record of stage {r.stage}, but {source} says the "
                f"directory holds stage {stage} ({len(other)} such record(s)); keep each "
                "stage's records in its own results directory"
            )
    matrix = stage_file.matrix
    reps = matrix.get("repetitions") if isinstance(matrix, Mapping) else None
    extension = matrix.get("extension") if isinstance(matrix, Mapping) else None
    extended = extension if isinstance(extension, Mapping) else {}

    def allowed(r: RunRecord) -> int | None:
        own = reps.get(r.stage) if isinstance(reps, Mapping) else None
        if not isinstance(own, int):
            return None
        more = extended.get(f"{r.recipe}/{r.input}")
        return max(own, more) if isinstance(more, int) else own

    beyond = [(n, r) for n, r in records if (a := allowed(r)) is not None and r.repetition > a]
    if beyond:
        n, r = beyond[0]
        cell = f"{r.recipe}/{r.input}"
        added = f" ({cell} included, with --until-stable's)" if cell in extended else ""
        raise RecordError(
            f"{path}: line {n}: repetition {r.repetition} of {r.run_id}, but the matrix "
            f"in {source} runs {allowed(r)} repetition(s) of stage {r.stage}{added} "
            f"({len(beyond)} such record(s)); the stage did not write them: restore the "
            "records file the stage wrote"
        )
    _check_iteration_limit(records, stage_file, source)


def _check_iteration_limit(
    records: Sequence[NumberedRecord], stage_file: StageFile, source: Path | str
) -> None:
    """The simulator's `max_iterations` in the provenance bounds every run's iterations:
    a provenance edited below them would be reported as the value the runs used."""
    provenance = stage_file.provenance
    params = provenance.simulator_parameters if provenance is not None else None
    limit = (params or {}).get("model", {}).get("max_iterations")
    if not isinstance(limit, int) or isinstance(limit, bool):
        return
    over = [(n, r) for n, r in records if r.iterations is not None and r.iterations > limit]
    if over:
        n, r = over[0]
        raise RecordError(
            f"{source}: provenance.simulator_parameters.model.max_iterations is {limit}, but "
            f"line {n} of the records ({r.run_id}) ran {r.iterations} iterations "
            f"({len(over)} such record(s)): the provenance is not the one the runs used; "
            "restore the stage.json the stage wrote"
        )


def read_checked_records(path: Path, matrix: Matrix) -> list[RunRecord]:
    """Read a records file and check it against `matrix`: the records to evaluate.

    RecordError when the file is missing, empty, has a bad line, or does not
    fit the matrix (see the module docstring); each message names the file
    and the lines.
    """
    numbered = read_numbered_records(path)
    check_against_matrix(numbered, matrix, path)
    return [record for _, record in numbered]
