"""From records to what the user sees: the one call of the evaluator, the report
written, and the one outcome printer that maps a verdict to its exit code.

Exit codes (spillover_operator.exit_codes): a decision the matrix can reach
(its chain's defaults or its fallback: `false` is a decision) is OK; runs of the
matrix missing is INCOMPLETE; anything else is INCONCLUSIVE.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from spillover_operator import exit_codes

from spillover_harness.cli.common import BadInput, Interrupted
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.records import RunRecord

if TYPE_CHECKING:
    from spillover_harness.results.results_dir import StageFile
    from spillover_harness.results.verdict import Verdict


def judge(
    records: Sequence[RunRecord],
    matrix: Matrix,
    *,
    allow_incomplete: bool,
    records_dir: Path | None = None,
) -> Verdict:
    """The one place the CLI asks the evaluator for a verdict: the expected matrix and
    `allow_incomplete` (judge a stage with runs missing) go to the evaluator here.
    With `records_dir`, the verdict carries the memory check (`memory_check`) of the
    records and the concurrency lane written beside them."""
    from spillover_harness.evaluate import evaluate

    verdict = evaluate(records, matrix, allow_incomplete=allow_incomplete)
    if records_dir is None:
        return verdict
    from spillover_harness.report.memory_check import check_memory
    from spillover_harness.report.status_report_check import check_status_report
    from spillover_harness.results.results_dir import LaneFileError, StageDir

    try:
        lane, problem = StageDir(records_dir).read_lane(), None
    except LaneFileError as exc:
        lane, problem = None, str(exc)
    memory = check_memory(records, matrix, verdict.stage, lane, problem)
    reports = check_status_report(records, matrix, verdict.stage)
    return verdict.model_copy(update={"memory": memory, "status_report": reports})


def decided(verdict: Verdict, matrix: Matrix) -> bool:
    """Whether the evaluator reached a decision (`Verdict.decided`: one the matrix's
    chain can end in, never hard-coded values: a chain may end in 65536)."""
    del matrix  # the evaluator judged against it; kept so callers read alike
    return verdict.decided


def incomplete(verdict: Verdict) -> bool:
    """Whether runs of the matrix are missing and the stage was therefore not judged.

    A stage judged anyway (`--allow-incomplete`) is not: its decision stands, and the
    report's first line says it was judged on incomplete data."""
    inc = verdict.incomplete
    return inc is not None and not inc.judged


def outcome_code(verdict: Verdict, matrix: Matrix) -> int:
    if incomplete(verdict):
        return exit_codes.INCOMPLETE
    return exit_codes.OK if decided(verdict, matrix) else exit_codes.INCONCLUSIVE


def decision_line(verdict: Verdict, matrix: Matrix) -> str:
    """`decision: 32768 (128KiB failed: input_tokens; 32KiB passed)`: one short line.

    The configurations are walked in the order of the decision chain, up to the
    one that decided; the full reasons and evidence are in the report. A stage
    with runs missing says that instead.
    """
    if incomplete(verdict):
        return f"decision: {verdict.decision} ({verdict.decision_reason})"
    parts: list[str] = []
    for step in matrix.decision.chain:
        cv = verdict.configs.get(step.config)
        if cv is None:
            continue
        if cv.verdict == "pass":
            parts.append(f"{cv.name} passed")
            break
        bad = [key for key, crit in cv.criteria.items() if crit.status == cv.verdict]
        word = "failed" if cv.verdict == "fail" else "inconclusive"
        parts.append(f"{cv.name} {word}" + (f": {', '.join(bad)}" if bad else ""))
        if cv.verdict != "fail":
            break  # an inconclusive configuration stops the chain
    return f"decision: {verdict.decision}" + (f" ({'; '.join(parts)})" if parts else "")


def rules_line(verdict: Verdict) -> str:
    """`rules: success_rate by non-inferiority; the literal rule decides false`."""
    chosen = ", ".join(f"{k} by {v.replace('_', '-')}" for k, v in verdict.rules.items())
    literal = verdict.literal_decision
    same = " too" if literal == verdict.decision else ""
    return f"rules: {chosen}; the literal rule decides {literal}{same}"


def exercised_line(verdict: Verdict) -> str | None:
    """`not exercised: 128KiB stored no result on ...` for the configuration that passed,
    None when it stored results in every cell (or none passed)."""
    from spillover_harness.results.verdict import unexercised_note

    decided = next((cv for cv in verdict.configs.values() if cv.verdict == "pass"), None)
    note = None if decided is None else unexercised_note(decided)
    return None if note is None else f"not exercised: {note}"


def reproducibility_line(verdict: Verdict) -> str:
    """`reproducibility: 131072; a fresh sim stage of this design would decide the same
    with probability 0.93 ...` (evaluate.reproducibility): the figure to read first."""
    from spillover_harness.evaluate.reproducibility import describe

    return f"reproducibility: {describe(verdict.decision, verdict.stage, verdict.reproducibility)}"


def stability_line(verdict: Verdict) -> str:
    """`stability: 131072 in 97% of 1000 resamples of this stage's own runs (a
    diagnostic ...)` (evaluate.stability)."""
    from spillover_harness.evaluate.stability import describe

    return f"stability: {describe(verdict.decision, verdict.stability)}"


def write_report(
    verdict: Verdict,
    records: Sequence[RunRecord],
    matrix: Matrix,
    out_dir: Path,
    *,
    records_path: Path,
    stage: StageFile | None,
    stage_notes: Sequence[str] = (),
    rerun: str,
) -> Path:
    """report.md, verdict.json and the plots under `out_dir` (which the caller holds).

    `stage` is the stage.json beside `records_path` (`common.stage_beside`), read before
    anything is written; `rerun` is the command that writes it again, named when
    writing fails or is interrupted (the records are never touched here).
    """
    from spillover_harness.report.report import write_report as write

    try:
        paths = write(
            verdict,
            records,
            matrix,
            out_dir,
            stage=stage,
            records_dir=records_path.parent,
            stage_notes=stage_notes,
        )
    except OSError as exc:
        raise BadInput(
            f"{out_dir}: cannot write the report: {exc.strerror or exc}; no record was "
            f"touched. After the fix: {rerun}"
        ) from None
    except KeyboardInterrupt:
        raise Interrupted(
            f"interrupted while writing the report: {out_dir / 'report.md'} was not written "
            f"(no record was touched). To write it: {rerun}"
        ) from None
    return Path(paths.report_md)


def print_outcome(
    verdict: Verdict,
    matrix: Matrix,
    *,
    lines: Sequence[str] = (),
    report_md: Path | None = None,
) -> int:
    """Print the outcome on stdout (`lines` first, the memory and status report checks,
    then the decision and the report) and return its exit code."""
    from spillover_harness.report.report import matrix_scope
    from spillover_harness.report.status_report_check import status_report_lines

    for line in lines:
        print(line)
    # the checks beside the criteria, before the decision, which stays at the end
    for line in [*memory_lines(verdict), *status_report_lines(verdict.status_report)]:
        print(line)
    scope = matrix_scope(matrix)
    if scope is not None:
        print(
            f"matrix: {matrix.name}, {scope.replace('`', '')}: its decision is about this "
            "matrix, not the shipped default"
        )
    print(decision_line(verdict, matrix))
    exercised = exercised_line(verdict)
    if exercised is not None:
        print(exercised)
    print(reproducibility_line(verdict))
    print(stability_line(verdict))
    if verdict.rules:
        print(rules_line(verdict))
    if report_md is not None:
        print(f"report: {report_md}")
    return outcome_code(verdict, matrix)


def _mib(value: int | None) -> str:
    return "not measured" if value is None else f"{value / 2**20:,.1f} MiB"


def memory_lines(verdict: Verdict) -> list[str]:
    """`memory (measured, against off): 128KiB peak 171.0 MiB = 1.07 x off, ...`: one
    line per configuration of the verdict's memory check (none without one)."""
    from spillover_harness.report.memory_check import claim_text, headroom_text

    check = verdict.memory
    if check is None:
        return []
    lines = [
        f"memory ({check.source}, against {check.baseline}; {check.comparison}; {check.claim}):"
    ]
    if check.lane_problem:
        lines.append(f"  memory-lane.json cannot be read: {check.lane_problem}")
    for name, m in check.configs.items():
        ratio = "n/a" if m.ratio_to_baseline is None else f"x{float(m.ratio_to_baseline):.3f}"
        room = headroom_text(m)
        leaked = "not measured" if m.leak_bytes is None else f"{m.leak_bytes / 2**20:+,.1f} MiB"
        lines.append(
            f"  {name}: peak {_mib(m.peak_bytes)} ({ratio} {check.baseline}), limit "
            f"{_mib(m.limit_bytes)}, headroom {room}, claim: {claim_text(m)}, "
            f"leak: {m.leak} ({leaked})"
        )
    return lines
