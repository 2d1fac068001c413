"""The evaluator: run records + matrix -> the verdict of docs/reference.md §3.

`evaluate` is a pure function. It groups the records once by
(configuration, recipe, input), judges every non-baseline configuration
against the baseline on the five acceptance criteria, each of them
three-valued (pass / fail / inconclusive) with its evidence, and walks the
decision chain.

Rules, as docs/reference.md §3 states them, and the interpretations taken where it
is silent (each is visible in the evidence):

- Runs with outcome `harness_error` are left out of every criterion; they
  are counted per configuration (and per cell) and reported.
- Only the matrix's configurations and (recipe, input) cells count. Other
  records are counted in `ignored` by reason, never silently dropped.
- A (recipe, input) cell with no valid run on either side makes the
  criterion inconclusive for that cell (criterion 5 looks at the
  configuration's side only: the baseline's leaks are not its criterion).
- Per-cell criteria: fail if any cell fails, else inconclusive if any cell
  is, else pass.
- Criterion 1 compares succeeded / valid runs as exact fractions.
- Criterion 2 compares limit-hit counts (count vs count, as the reference says,
  even when the number of valid runs differs; the evidence says so). A null
  `hit_iteration_limit` makes the cell inconclusive, except when the
  configuration's known hits already exceed every hit the baseline could
  have (then the cell fails whatever the unmeasured runs show): the data
  prove the failure, as a false `disk_clean` does for criterion 5. A pass
  always needs every run measured.
- Criterion 3 takes the size class declared by the matrix. (Records of cells
  the matrix does not declare are ignored, so the record's own `size_class`
  is never needed; a record whose `size_class` disagrees with the matrix is
  reported in `warnings`, and the matrix wins.) small/medium: median <=
  (1 + tolerance) x baseline median; large: median < baseline median. The
  tolerance is read as the decimal the matrix states (0.10 -> 1/10) and all
  comparisons are exact (fractions), so 110 <= 1.10 x 100 holds.
- Criterion 4: per recipe of `acceptance.quality_recipes`, all its inputs
  together, quality_ok true / known, exact fractions. A matrix that declares
  no quality recipe makes the criterion pass as "not applicable".
- Criterion 5: per cell, the configuration's valid runs: a false
  `disk_clean`/`logs_clean` fails, otherwise a null is inconclusive.
- "Too few valid runs" means none: a cell is judged on whatever valid runs it
  has. Fewer valid runs than the stage plans is an advisory hint only.

Stages are never mixed: with `stage=None` the records must hold one stage
(else ValueError); with `stage=...` only that stage's records are evaluated
and the others are counted in `ignored`.

`Verdict.runs_needed` is set only when the decision is `inconclusive`: the runs
(of the configuration that stopped the chain, or of the baseline) that would
let that configuration be judged. A missing or all-harness_error cell asks for
the stage's planned repetitions; a recorded null asks to redo those runs.

Advisory statistics (bootstrap CIs of the median token ratios, hints) are
attached to the verdict but never change a status or the decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from spillover_harness import stats
from spillover_harness.matrix import Matrix
from spillover_harness.records import STAGES, RunRecord

Status = Literal["pass", "fail", "inconclusive"]
PASS: Status = "pass"
FAIL: Status = "fail"
INCONCLUSIVE: Status = "inconclusive"

DECISION_INCONCLUSIVE = "inconclusive"

CRITERIA: tuple[str, ...] = (
    "success_rate",
    "iteration_limit",
    "input_tokens",
    "summary_quality",
    "no_leak",
)

CRITERION_TITLES: dict[str, str] = {
    "success_rate": "Success rate",
    "iteration_limit": "Iteration limit",
    "input_tokens": "Median input tokens",
    "summary_quality": "Summary quality",
    "no_leak": "Nothing on disk, nothing in the logs",
}

Number = int | float


def _num(value: Fraction | None) -> Number | None:
    """A fraction as a JSON number: an int when whole, else a float."""
    if value is None:
        return None
    if value.denominator == 1:
        return int(value.numerator)
    return float(value)


def _fmt(value: Fraction | None) -> str:
    """A fraction for a sentence: whole numbers as ints, else up to 2 decimals."""
    if value is None:
        return "n/a"
    if value.denominator == 1:
        return f"{value.numerator:,}"
    return f"{float(value):,.2f}".rstrip("0").rstrip(".")


def _rate(num: int, den: int) -> str:
    return f"{num}/{den}"


def combine(statuses: Sequence[Status]) -> Status:
    """fail if any fails; otherwise inconclusive if any is; otherwise pass."""
    if FAIL in statuses:
        return FAIL
    if INCONCLUSIVE in statuses:
        return INCONCLUSIVE
    return PASS


# -- verdict types ---------------------------------------------------------------------


@dataclass(frozen=True)
class RunsNeeded:
    """Runs that would resolve an inconclusive criterion for one cell and side.

    `rerun_ids` lists recorded runs whose missing measurement keeps the cell
    inconclusive: they have to be replaced (run again with the measurement
    working), since adding runs does not remove a null already recorded.
    """

    config: str
    recipe: str
    input: str
    runs: int
    criteria: tuple[str, ...]
    reason: str
    rerun_ids: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "recipe": self.recipe,
            "input": self.input,
            "runs": self.runs,
            "criteria": list(self.criteria),
            "reason": self.reason,
            "rerun_ids": list(self.rerun_ids),
        }


@dataclass(frozen=True)
class CellEvidence:
    """The evidence of one criterion for one cell (or one recipe, for criterion 4).

    `value` is the configuration's figure, `baseline_value` the baseline's,
    `limit` what `value` is held against under `comparison`. `n` counts the
    configuration's runs the figure is taken over, `n_baseline` the
    baseline's; `harness_errors*` the runs left out.
    """

    recipe: str
    input: str | None  # None: every input of the recipe together
    size_class: str | None
    status: Status
    value: Fraction | None
    baseline_value: Fraction | None
    limit: Fraction | None
    comparison: str
    n: int
    n_baseline: int | None
    harness_errors: int
    harness_errors_baseline: int | None
    reason: str
    counts: Mapping[str, int]
    baseline_counts: Mapping[str, int] | None = None

    @property
    def label(self) -> str:
        return (
            f"{self.recipe}/{self.input}"
            if self.input is not None
            else f"{self.recipe} (all inputs)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "input": self.input,
            "size_class": self.size_class,
            "status": self.status,
            "value": _num(self.value),
            "baseline_value": _num(self.baseline_value),
            "limit": _num(self.limit),
            "comparison": self.comparison,
            "n": self.n,
            "n_baseline": self.n_baseline,
            "harness_errors": self.harness_errors,
            "harness_errors_baseline": self.harness_errors_baseline,
            "counts": dict(self.counts),
            "baseline_counts": None if self.baseline_counts is None else dict(self.baseline_counts),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class CriterionResult:
    key: str
    status: Status
    rule: str
    reason: str
    cells: tuple[CellEvidence, ...]
    tolerance: Fraction | None = None
    runs_needed: tuple[RunsNeeded, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "status": self.status,
            "rule": self.rule,
            "reason": self.reason,
        }
        if self.tolerance is not None:
            data["tolerance"] = float(self.tolerance)
        data["cells"] = [c.to_json() for c in self.cells]
        return data


@dataclass(frozen=True)
class ConfigVerdict:
    name: str
    verdict: Status
    criteria: dict[str, CriterionResult]
    reason: str
    runs: int  # records of this configuration in the matrix's cells
    harness_errors: int
    runs_needed: tuple[RunsNeeded, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "criteria": {key: self.criteria[key].to_json() for key in CRITERIA},
        }


@dataclass(frozen=True)
class CellSummary:
    """What one configuration did in one cell (for the per-cell tables).

    Medians are over the cell's valid runs (not harness_error) with the
    figure measured.
    """

    config: str
    recipe: str
    input: str
    size_class: str
    runs: int
    harness_errors: int
    valid: int
    succeeded: int
    outcomes: dict[str, int]
    limit_hits: int
    limit_unknown: int
    median_input_tokens: float | None
    median_output_tokens: float | None
    median_iterations: float | None
    median_duration_s: float | None
    median_persisted: float | None
    median_reads: float | None
    median_status_report_bytes: float | None
    quality_true: int
    quality_known: int
    leaks: int
    leak_unknown: int

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "recipe": self.recipe,
            "input": self.input,
            "size_class": self.size_class,
            "runs": self.runs,
            "harness_errors": self.harness_errors,
            "valid": self.valid,
            "succeeded": self.succeeded,
            "outcomes": dict(self.outcomes),
            "limit_hits": self.limit_hits,
            "limit_unknown": self.limit_unknown,
            "median_input_tokens": self.median_input_tokens,
            "median_output_tokens": self.median_output_tokens,
            "median_iterations": self.median_iterations,
            "median_duration_s": self.median_duration_s,
            "median_persisted": self.median_persisted,
            "median_reads": self.median_reads,
            "median_status_report_bytes": self.median_status_report_bytes,
            "quality_true": self.quality_true,
            "quality_known": self.quality_known,
            "leaks": self.leaks,
            "leak_unknown": self.leak_unknown,
        }


@dataclass(frozen=True)
class TokenRatio:
    """Advisory: the median input-token ratio of a cell and its bootstrap CI."""

    config: str
    recipe: str
    input: str
    size_class: str
    ratio: float | None
    ci: tuple[float, float] | None
    limit: float
    strict: bool  # large inputs: the ratio must be strictly below the limit
    n: int
    n_baseline: int
    reading: str  # clear pass | clear fail | close call | no data
    runs_to_resolve: int | None
    hint: str

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "recipe": self.recipe,
            "input": self.input,
            "size_class": self.size_class,
            "ratio": self.ratio,
            "ci": None if self.ci is None else list(self.ci),
            "limit": self.limit,
            "strict": self.strict,
            "n": self.n,
            "n_baseline": self.n_baseline,
            "reading": self.reading,
            "runs_to_resolve": self.runs_to_resolve,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class Advisory:
    """Statistics for the reader; they never change a status or the decision."""

    confidence: float
    resamples: int
    seed: int
    token_ratios: tuple[TokenRatio, ...]
    hints: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "note": "advisory only: never changes a status or the decision",
            "confidence": self.confidence,
            "resamples": self.resamples,
            "seed": self.seed,
            "token_ratios": [t.to_json() for t in self.token_ratios],
            "hints": list(self.hints),
        }


@dataclass(frozen=True)
class Verdict:
    decision: str  # "131072" | "32768" | "false" | "inconclusive" (from the matrix's chain)
    decision_reason: str
    runs_needed: tuple[RunsNeeded, ...]
    configs: dict[str, ConfigVerdict]  # every non-baseline configuration, in matrix order
    stage: str | None  # None only when there was no record to evaluate
    matrix_name: str
    baseline: str
    tolerance: Fraction
    records_evaluated: int  # records of the stage in the matrix's configurations and cells
    harness_errors: dict[str, int]  # per configuration, baseline included
    ignored: dict[str, int]  # reason -> count
    warnings: tuple[str, ...]
    cells: tuple[CellSummary, ...]
    advisory: Advisory

    @property
    def ignored_total(self) -> int:
        return sum(self.ignored.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "decision_reason": self.decision_reason,
            "stage": self.stage,
            "matrix": self.matrix_name,
            "baseline": self.baseline,
            "configs": {name: cv.to_json() for name, cv in self.configs.items()},
            "runs_needed": [r.to_json() for r in self.runs_needed],
            "records_evaluated": self.records_evaluated,
            "harness_errors": dict(self.harness_errors),
            "ignored": {"total": self.ignored_total, "by_reason": dict(self.ignored)},
            "warnings": list(self.warnings),
            "cells": [c.to_json() for c in self.cells],
            "advisory": self.advisory.to_json(),
        }


# -- grouping --------------------------------------------------------------------------


class _CellData:
    """Everything the criteria need from one (configuration, recipe, input), in one pass."""

    __slots__ = (
        "clean",
        "durations",
        "harness_errors",
        "hit_null_ids",
        "hits",
        "iterations",
        "leak_ids",
        "leak_unknown_ids",
        "outcomes",
        "output_tokens",
        "persisted",
        "quality_known",
        "quality_true",
        "reads",
        "report_bytes",
        "runs",
        "succeeded",
        "tokens",
        "valid",
    )

    def __init__(self) -> None:
        self.runs = 0
        self.harness_errors = 0
        self.valid = 0
        self.succeeded = 0
        self.outcomes: dict[str, int] = {}
        self.hits = 0
        self.hit_null_ids: list[str] = []
        self.tokens: list[int] = []
        self.output_tokens: list[int] = []
        self.iterations: list[int] = []
        self.durations: list[float] = []
        self.persisted: list[int] = []
        self.reads: list[int] = []
        self.report_bytes: list[int] = []
        self.quality_true = 0
        self.quality_known = 0
        self.clean = 0
        self.leak_ids: list[str] = []
        self.leak_unknown_ids: list[str] = []

    def add(self, r: RunRecord) -> None:
        self.runs += 1
        outcome = r.outcome
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if outcome == "harness_error":
            self.harness_errors += 1
            return
        self.valid += 1
        if outcome == "succeeded":
            self.succeeded += 1
        hit = r.hit_iteration_limit
        if hit is None:
            self.hit_null_ids.append(r.run_id)
        elif hit:
            self.hits += 1
        if r.input_tokens is not None:
            self.tokens.append(r.input_tokens)
        if r.output_tokens is not None:
            self.output_tokens.append(r.output_tokens)
        if r.iterations is not None:
            self.iterations.append(r.iterations)
        if r.duration_s is not None:
            self.durations.append(r.duration_s)
        if r.spillover_persisted is not None:
            self.persisted.append(r.spillover_persisted)
        if r.spillover_reads is not None:
            self.reads.append(r.spillover_reads)
        if r.status_report_bytes is not None:
            self.report_bytes.append(r.status_report_bytes)
        if r.quality_ok is not None:
            self.quality_known += 1
            if r.quality_ok:
                self.quality_true += 1
        disk, logs = r.disk_clean, r.logs_clean
        if disk is False or logs is False:
            self.leak_ids.append(r.run_id)
        elif disk is None or logs is None:
            self.leak_unknown_ids.append(r.run_id)
        else:
            self.clean += 1


Key = tuple[str, str, str]  # configuration, recipe, input


def median(values: Sequence[int]) -> Fraction | None:
    """The usual median, exact: the mean of the two middle values for an even count."""
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    if n % 2 == 1:
        return Fraction(ordered[mid])
    return Fraction(ordered[mid - 1] + ordered[mid], 2)


def _median_float(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    if n % 2 == 1:
        return float(ordered[mid])
    return (ordered[mid - 1] + ordered[mid]) / 2.0


@dataclass(frozen=True)
class _Ctx:
    baseline: str
    target: int  # valid runs per cell the stage plans
    tolerance: Fraction
    cells: tuple[tuple[str, str, str], ...]  # recipe, input, size_class (matrix order)
    quality_recipes: tuple[str, ...]
    data: dict[Key, _CellData]

    def get(self, config: str, recipe: str, input_name: str) -> _CellData:
        return self.data[(config, recipe, input_name)]


def _missing(
    ctx: _Ctx, criterion: str, sides: Sequence[str], recipe: str, input_name: str
) -> tuple[list[str], list[RunsNeeded]]:
    """Sides without a valid run in the cell: the reasons and the runs they need."""
    reasons: list[str] = []
    needs: list[RunsNeeded] = []
    for side in sides:
        d = ctx.get(side, recipe, input_name)
        if d.valid:
            continue
        why = (
            f"no valid run of {side} ({d.harness_errors} harness_error)"
            if d.harness_errors
            else f"no run of {side} recorded"
        )
        reasons.append(why)
        needs.append(
            RunsNeeded(
                side,
                recipe,
                input_name,
                ctx.target,
                (criterion,),
                f"{why}: needs {ctx.target} valid run(s)",
            )
        )
    return reasons, needs


def _result(
    key: str,
    rule: str,
    cells: list[CellEvidence],
    needs: list[RunsNeeded],
    tolerance: Fraction | None = None,
    empty_reason: str = "",
) -> CriterionResult:
    status = combine([c.status for c in cells])
    if not cells:
        reason = empty_reason
    elif status == PASS:
        reason = "every cell passes" if len(cells) > 1 else cells[0].reason
    else:
        bad = [c for c in cells if c.status == status]
        reason = "; ".join(f"{c.label}: {c.reason}" for c in bad)
    return CriterionResult(key, status, rule, reason, tuple(cells), tolerance, tuple(needs))


# -- the five criteria -----------------------------------------------------------------


def _success_rate(ctx: _Ctx, cfg: str) -> CriterionResult:
    base = ctx.baseline
    cells: list[CellEvidence] = []
    needs: list[RunsNeeded] = []
    for recipe, inp, size in ctx.cells:
        c, b = ctx.get(cfg, recipe, inp), ctx.get(base, recipe, inp)
        missing, need = _missing(ctx, "success_rate", (cfg, base), recipe, inp)
        value = Fraction(c.succeeded, c.valid) if c.valid else None
        baseline = Fraction(b.succeeded, b.valid) if b.valid else None
        if missing:
            status, reason = INCONCLUSIVE, "; ".join(missing)
            needs.extend(need)
        else:
            assert value is not None and baseline is not None
            ok = value >= baseline
            status = PASS if ok else FAIL
            reason = (
                f"{_rate(c.succeeded, c.valid)} {'>=' if ok else '<'} "
                f"{base}'s {_rate(b.succeeded, b.valid)}"
            )
        cells.append(
            CellEvidence(
                recipe,
                inp,
                size,
                status,
                value,
                baseline,
                baseline,
                "value >= baseline_value",
                c.valid,
                b.valid,
                c.harness_errors,
                b.harness_errors,
                reason,
                {"succeeded": c.succeeded, "valid": c.valid},
                {"succeeded": b.succeeded, "valid": b.valid},
            )
        )
    rule = (
        f"per (recipe, input): succeeded / (runs - harness_error) >= {base}'s, "
        "compared as exact fractions"
    )
    return _result("success_rate", rule, cells, needs)


def _iteration_limit(ctx: _Ctx, cfg: str) -> CriterionResult:
    base = ctx.baseline
    cells: list[CellEvidence] = []
    needs: list[RunsNeeded] = []
    for recipe, inp, size in ctx.cells:
        c, b = ctx.get(cfg, recipe, inp), ctx.get(base, recipe, inp)
        missing, need = _missing(ctx, "iteration_limit", (cfg, base), recipe, inp)
        c_null, b_null = len(c.hit_null_ids), len(b.hit_null_ids)
        note = ""
        if not missing and c.valid != b.valid:
            note = (
                f" (counts compared as the reference states, although the valid runs differ: "
                f"{c.valid} vs {b.valid})"
            )
        if missing:
            status, reason = INCONCLUSIVE, "; ".join(missing)
            needs.extend(need)
        elif c.hits > b.hits + b_null:
            status = FAIL
            reason = f"{c.hits} limit hit(s) > {base}'s {b.hits}"
            if c_null or b_null:
                reason += " whatever the unmeasured runs show"
            reason += note
        elif c_null or b_null:
            status = INCONCLUSIVE
            parts = []
            for side, d in ((cfg, c), (base, b)):
                if d.hit_null_ids:
                    count = len(d.hit_null_ids)
                    parts.append(f"{count} run(s) of {side} did not measure hit_iteration_limit")
                    needs.append(
                        RunsNeeded(
                            side,
                            recipe,
                            inp,
                            count,
                            ("iteration_limit",),
                            f"{count} run(s) without hit_iteration_limit: run them again with "
                            "the measurement working (a recorded null keeps the cell "
                            "inconclusive)",
                            tuple(d.hit_null_ids),
                        )
                    )
            reason = "; ".join(parts)
        else:
            ok = c.hits <= b.hits
            status = PASS if ok else FAIL
            reason = f"{c.hits} limit hit(s) {'<=' if ok else '>'} {base}'s {b.hits}{note}"
        cells.append(
            CellEvidence(
                recipe,
                inp,
                size,
                status,
                Fraction(c.hits),
                Fraction(b.hits),
                Fraction(b.hits),
                "value <= baseline_value (counts of limit hits)",
                c.valid,
                b.valid,
                c.harness_errors,
                b.harness_errors,
                reason,
                {"hits": c.hits, "unknown": c_null, "valid": c.valid},
                {"hits": b.hits, "unknown": b_null, "valid": b.valid},
            )
        )
    rule = (
        f"per (recipe, input): the count of limit hits must not exceed {base}'s; "
        "an unmeasured hit_iteration_limit makes the cell inconclusive"
    )
    return _result("iteration_limit", rule, cells, needs)


def _input_tokens(ctx: _Ctx, cfg: str) -> CriterionResult:
    base = ctx.baseline
    tol = ctx.tolerance
    factor = 1 + tol
    cells: list[CellEvidence] = []
    needs: list[RunsNeeded] = []
    for recipe, inp, size in ctx.cells:
        c, b = ctx.get(cfg, recipe, inp), ctx.get(base, recipe, inp)
        missing, need = _missing(ctx, "input_tokens", (cfg, base), recipe, inp)
        c_med, b_med = median(c.tokens), median(b.tokens)
        large = size == "large"
        limit: Fraction | None = None
        if b_med is not None:
            limit = b_med if large else factor * b_med
        comparison = (
            "value < baseline_value (median)"
            if large
            else f"value <= {_fmt(factor)} x baseline_value"
        )
        if missing:
            status, reason = INCONCLUSIVE, "; ".join(missing)
            needs.extend(need)
        elif c_med is None or b_med is None:
            status = INCONCLUSIVE
            parts = []
            for side, d in ((cfg, c), (base, b)):
                if not d.tokens:
                    why = (
                        f"input_tokens not measured on any of the {d.valid} valid run(s) of {side}"
                    )
                    parts.append(why)
                    needs.append(
                        RunsNeeded(
                            side,
                            recipe,
                            inp,
                            ctx.target,
                            ("input_tokens",),
                            f"{why}: needs {ctx.target} run(s) with input_tokens measured",
                        )
                    )
            reason = "; ".join(parts)
        else:
            assert limit is not None
            if large:
                ok = c_med < limit
                reason = (
                    f"median {_fmt(c_med)} {'<' if ok else 'is not below'} "
                    f"{base}'s median {_fmt(b_med)} (large input)"
                )
            else:
                ok = c_med <= limit
                reason = (
                    f"median {_fmt(c_med)} {'<=' if ok else '>'} {_fmt(factor)} x "
                    f"{base}'s median {_fmt(b_med)} = {_fmt(limit)} ({size} input)"
                )
            status = PASS if ok else FAIL
        cells.append(
            CellEvidence(
                recipe,
                inp,
                size,
                status,
                c_med,
                b_med,
                limit,
                comparison,
                len(c.tokens),
                len(b.tokens),
                c.harness_errors,
                b.harness_errors,
                reason,
                {"known": len(c.tokens), "valid": c.valid},
                {"known": len(b.tokens), "valid": b.valid},
            )
        )
    rule = (
        f"per (recipe, input), median over runs with known input_tokens: small and medium "
        f"inputs <= {_fmt(factor)} x {base}'s median; large inputs < {base}'s median"
    )
    return _result("input_tokens", rule, cells, needs, tolerance=tol)


def _summary_quality(ctx: _Ctx, cfg: str) -> CriterionResult:
    base = ctx.baseline
    cells: list[CellEvidence] = []
    needs: list[RunsNeeded] = []
    for recipe in ctx.quality_recipes:
        inputs = [(inp, size) for r, inp, size in ctx.cells if r == recipe]
        sizes = sorted({size for _, size in inputs})
        missing: list[str] = []
        totals = {cfg: [0, 0, 0, 0], base: [0, 0, 0, 0]}  # true, known, valid, harness_error
        for inp, _ in inputs:
            reasons, need = _missing(ctx, "summary_quality", (cfg, base), recipe, inp)
            missing.extend(f"{inp}: {why}" for why in reasons)
            needs.extend(need)
            for side in (cfg, base):
                d = ctx.get(side, recipe, inp)
                t = totals[side]
                t[0] += d.quality_true
                t[1] += d.quality_known
                t[2] += d.valid
                t[3] += d.harness_errors
        ct, ck, cv, ch = totals[cfg]
        bt, bk, bv, bh = totals[base]
        value = Fraction(ct, ck) if ck else None
        baseline = Fraction(bt, bk) if bk else None
        if missing:
            status, reason = INCONCLUSIVE, "; ".join(missing)
        elif value is None or baseline is None:
            status = INCONCLUSIVE
            parts = []
            for side, known, valid in ((cfg, ck, cv), (base, bk, bv)):
                if known:
                    continue
                why = f"quality_ok not judged on any of the {valid} valid run(s) of {side}"
                parts.append(why)
                for inp, _ in inputs:
                    needs.append(
                        RunsNeeded(
                            side,
                            recipe,
                            inp,
                            ctx.target,
                            ("summary_quality",),
                            f"{why}: needs {ctx.target} run(s) with quality judged",
                        )
                    )
            reason = "; ".join(parts)
        else:
            ok = value >= baseline
            status = PASS if ok else FAIL
            reason = f"quality ok {_rate(ct, ck)} {'>=' if ok else '<'} {base}'s {_rate(bt, bk)}"
        cells.append(
            CellEvidence(
                recipe,
                None,
                "/".join(sizes),
                status,
                value,
                baseline,
                baseline,
                "value >= baseline_value (quality_ok true / known)",
                ck,
                bk,
                ch,
                bh,
                reason,
                {"quality_ok": ct, "known": ck, "valid": cv},
                {"quality_ok": bt, "known": bk, "valid": bv},
            )
        )
    rule = (
        f"for {', '.join(ctx.quality_recipes) or '(no quality recipe)'}, all inputs together: "
        f"quality_ok rate (true / known) >= {base}'s, compared as exact fractions"
    )
    return _result(
        "summary_quality",
        rule,
        cells,
        needs,
        empty_reason="not applicable: the matrix declares no quality recipe",
    )


def _no_leak(ctx: _Ctx, cfg: str) -> CriterionResult:
    cells: list[CellEvidence] = []
    needs: list[RunsNeeded] = []
    for recipe, inp, size in ctx.cells:
        c = ctx.get(cfg, recipe, inp)
        missing, need = _missing(ctx, "no_leak", (cfg,), recipe, inp)
        if missing:
            status, reason = INCONCLUSIVE, "; ".join(missing)
            needs.extend(need)
        elif c.leak_ids:
            status = FAIL
            shown = ", ".join(c.leak_ids[:5]) + (", ..." if len(c.leak_ids) > 5 else "")
            reason = f"{len(c.leak_ids)} run(s) wrote to disk or logged result content ({shown})"
        elif c.leak_unknown_ids:
            status = INCONCLUSIVE
            count = len(c.leak_unknown_ids)
            reason = f"{count} run(s) without the disk or log check"
            needs.append(
                RunsNeeded(
                    cfg,
                    recipe,
                    inp,
                    count,
                    ("no_leak",),
                    f"{reason}: run them again with both checks working (a recorded null "
                    "keeps the cell inconclusive)",
                    tuple(c.leak_unknown_ids),
                )
            )
        else:
            status = PASS
            reason = f"disk and logs clean on all {c.valid} valid run(s)"
        cells.append(
            CellEvidence(
                recipe,
                inp,
                size,
                status,
                Fraction(c.clean),
                None,
                Fraction(c.valid),
                "value == limit (runs with disk_clean and logs_clean both true, of valid runs)",
                c.valid,
                None,
                c.harness_errors,
                None,
                reason,
                {
                    "clean": c.clean,
                    "leaked": len(c.leak_ids),
                    "unchecked": len(c.leak_unknown_ids),
                    "valid": c.valid,
                },
            )
        )
    rule = (
        "disk_clean and logs_clean true on every valid run of the configuration "
        "(a false anywhere fails; otherwise a null makes it inconclusive)"
    )
    return _result("no_leak", rule, cells, needs)


_CRITERION_FUNCS = {
    "success_rate": _success_rate,
    "iteration_limit": _iteration_limit,
    "input_tokens": _input_tokens,
    "summary_quality": _summary_quality,
    "no_leak": _no_leak,
}


def _merge_needs(needs: Sequence[RunsNeeded]) -> tuple[RunsNeeded, ...]:
    """One entry per (configuration, recipe, input): the most runs any criterion needs."""
    merged: dict[Key, RunsNeeded] = {}
    for need in needs:
        key = (need.config, need.recipe, need.input)
        prev = merged.get(key)
        if prev is None:
            merged[key] = need
            continue
        criteria = prev.criteria + tuple(c for c in need.criteria if c not in prev.criteria)
        reasons = prev.reason if need.reason in prev.reason else f"{prev.reason}; {need.reason}"
        ids = prev.rerun_ids + tuple(i for i in need.rerun_ids if i not in prev.rerun_ids)
        merged[key] = RunsNeeded(
            need.config,
            need.recipe,
            need.input,
            max(prev.runs, need.runs),
            criteria,
            reasons,
            ids,
        )
    return tuple(merged.values())


def _judge_config(ctx: _Ctx, cfg: str) -> ConfigVerdict:
    criteria = {key: _CRITERION_FUNCS[key](ctx, cfg) for key in CRITERIA}
    verdict = combine([c.status for c in criteria.values()])
    if verdict == PASS:
        reason = "passes every criterion"
    else:
        bad = [c for c in criteria.values() if c.status == verdict]
        reason = "; ".join(f"{c.key}: {c.reason}" for c in bad)
    runs = sum(ctx.get(cfg, r, i).runs for r, i, _ in ctx.cells)
    errors = sum(ctx.get(cfg, r, i).harness_errors for r, i, _ in ctx.cells)
    needs = _merge_needs([n for c in criteria.values() for n in c.runs_needed])
    return ConfigVerdict(cfg, verdict, criteria, reason, runs, errors, needs)


def _decide(
    matrix: Matrix, configs: Mapping[str, ConfigVerdict]
) -> tuple[str, str, tuple[RunsNeeded, ...]]:
    base = matrix.acceptance.baseline
    said: list[str] = []
    for step in matrix.decision.chain:
        cv = configs[step.config]
        if cv.verdict == PASS:
            said.append(f"{cv.name} passes every criterion against {base}")
            return step.default, "; ".join(said) + f": the default is {step.default}", ()
        if cv.verdict == FAIL:
            said.append(f"{cv.name} fails ({cv.reason})")
            continue
        said.append(f"{cv.name} is inconclusive ({cv.reason})")
        return (
            DECISION_INCONCLUSIVE,
            "; ".join(said) + ": no decision until the runs needed are in",
            cv.runs_needed,
        )
    fallback = matrix.decision.fallback
    return (
        fallback,
        "; ".join(said) + f": no configuration of the chain passes, the default is {fallback}",
        (),
    )


# -- advisory --------------------------------------------------------------------------


def _advisory(
    ctx: _Ctx,
    cfg_names: Sequence[str],
    confidence: float,
    resamples: int,
    seed: int,
) -> Advisory:
    base = ctx.baseline
    ratios: list[TokenRatio] = []
    hints: list[str] = []
    factor = float(1 + ctx.tolerance)
    for cfg in cfg_names:
        for recipe, inp, size in ctx.cells:
            c, b = ctx.get(cfg, recipe, inp), ctx.get(base, recipe, inp)
            strict = size == "large"
            limit = 1.0 if strict else factor
            c_med, b_med = median(c.tokens), median(b.tokens)
            ratio = float(c_med / b_med) if c_med is not None and b_med else None
            ci = stats.bootstrap_median_ratio_ci(
                c.tokens, b.tokens, confidence=confidence, resamples=resamples, seed=seed
            )
            n, n_base = len(c.tokens), len(b.tokens)
            runs: int | None = None
            label = f"{cfg} {recipe}/{inp}"
            if ratio is None or ci is None:
                reading, hint = "no data", ""
            else:
                low, high = ci
                clears = high < limit if strict else high <= limit
                breaks = low >= limit if strict else low > limit
                if clears:
                    reading, hint = "clear pass", ""
                elif breaks:
                    reading, hint = "clear fail", ""
                else:
                    reading = "close call"
                    runs = stats.estimated_runs_to_resolve(ratio, ci, limit, max(1, min(n, n_base)))
                    ci_text = f"[{low:.3f}, {high:.3f}]"
                    if runs is None:
                        hint = (
                            f"{label}: median ratio {ratio:.3f}, {confidence:.0%} CI {ci_text} "
                            f"straddles the limit {limit:.2f}; more runs would not settle it"
                        )
                    else:
                        hint = (
                            f"{label}: median ratio {ratio:.3f}, {confidence:.0%} CI {ci_text} "
                            f"straddles the limit {limit:.2f}; about {runs} run(s) per side "
                            f"(now {min(n, n_base)}) would likely settle it"
                        )
                    hints.append(hint)
            ratios.append(
                TokenRatio(
                    cfg, recipe, inp, size, ratio, ci, limit, strict, n, n_base, reading, runs, hint
                )
            )
    for cfg in (base, *cfg_names):
        for recipe, inp, _ in ctx.cells:
            d = ctx.get(cfg, recipe, inp)
            if 0 < d.valid < ctx.target:
                hints.append(
                    f"{cfg} {recipe}/{inp}: {d.valid} valid run(s) of the {ctx.target} planned "
                    f"({d.harness_errors} harness_error); the comparison rests on few runs"
                )
    base_leaks = sum(len(ctx.get(base, r, i).leak_ids) for r, i, _ in ctx.cells)
    if base_leaks:
        hints.append(
            f"{base} (the baseline) shows {base_leaks} run(s) with a disk or log leak: "
            "either the leak checks misfire or something leaks without spillover"
        )
    return Advisory(confidence, resamples, seed, tuple(ratios), tuple(hints))


# -- the entry point -------------------------------------------------------------------


def evaluate(
    records: Sequence[RunRecord],
    matrix: Matrix,
    *,
    stage: str | None = None,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Verdict:
    """Judge the records of one stage against the matrix (docs/reference.md §3). Pure.

    With `stage=None` the records must all be of one stage (ValueError
    otherwise); with a stage, the records of other stages are ignored and
    counted. `confidence`, `resamples` and `seed` only drive the advisory
    bootstrap.
    """
    if stage is not None and stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r} (known: {', '.join(STAGES)})")
    stages = sorted({r.stage for r in records})
    if stage is None:
        if len(stages) > 1:
            raise ValueError(
                f"the records hold several stages ({', '.join(stages)}); a verdict is for "
                "one stage: evaluate them separately (pass stage=...)"
            )
        stage = stages[0] if stages else None

    base = matrix.acceptance.baseline
    config_names = [c.name for c in matrix.configurations]
    declared = {(r.name, i.name): i.size_class for r, i in matrix.cells()}
    cell_list = tuple((r.name, i.name, i.size_class) for r, i in matrix.cells())
    data: dict[Key, _CellData] = {
        (cfg, recipe, inp): _CellData() for cfg in config_names for recipe, inp, _ in cell_list
    }

    ignored: dict[str, int] = {}
    size_mismatch: dict[tuple[str, str, str], int] = {}
    seen_keys: set[tuple[str, str, str, int]] = set()
    duplicate_keys = 0
    seen_ids: set[str] = set()
    duplicate_ids = 0
    evaluated = 0
    for r in records:
        if r.stage != stage:
            why = f"stage {r.stage!r} (evaluating {stage!r})"
            ignored[why] = ignored.get(why, 0) + 1
            continue
        cell = data.get((r.config, r.recipe, r.input))
        if cell is None:
            if r.config not in config_names:
                why = f"configuration {r.config!r} not in the matrix"
            else:
                why = f"cell {r.recipe}/{r.input} not in the matrix"
            ignored[why] = ignored.get(why, 0) + 1
            continue
        evaluated += 1
        cell.add(r)
        declared_size = declared[(r.recipe, r.input)]
        if r.size_class != declared_size:
            mk = (r.recipe, r.input, r.size_class)
            size_mismatch[mk] = size_mismatch.get(mk, 0) + 1
        run_key = (r.config, r.recipe, r.input, r.repetition)
        if run_key in seen_keys:
            duplicate_keys += 1
        else:
            seen_keys.add(run_key)
        if r.run_id in seen_ids:
            duplicate_ids += 1
        else:
            seen_ids.add(r.run_id)

    warnings: list[str] = []
    for (recipe, inp, size), count in sorted(size_mismatch.items()):
        warnings.append(
            f"{count} record(s) of {recipe}/{inp} say size_class {size!r}; the matrix declares "
            f"{declared[(recipe, inp)]!r}, which the evaluation uses"
        )
    if duplicate_keys:
        warnings.append(
            f"{duplicate_keys} record(s) repeat a (configuration, recipe, input, repetition) "
            "already recorded; all of them were counted"
        )
    if duplicate_ids:
        warnings.append(f"{duplicate_ids} record(s) repeat a run_id already recorded")

    target = matrix.repetitions.for_stage(stage) if stage is not None else 1
    ctx = _Ctx(
        baseline=base,
        target=target,
        tolerance=Fraction(repr(matrix.acceptance.token_tolerance)),
        cells=cell_list,
        quality_recipes=tuple(matrix.acceptance.quality_recipes),
        data=data,
    )
    judged = [name for name in config_names if name != base]
    configs = {name: _judge_config(ctx, name) for name in judged}
    decision, reason, runs_needed = _decide(matrix, configs)
    harness_errors = {
        name: sum(data[(name, r, i)].harness_errors for r, i, _ in cell_list)
        for name in config_names
    }
    summaries = tuple(
        _summarize(name, recipe, inp, size, data[(name, recipe, inp)])
        for recipe, inp, size in cell_list
        for name in config_names
    )
    return Verdict(
        decision=decision,
        decision_reason=reason,
        runs_needed=runs_needed,
        configs=configs,
        stage=stage,
        matrix_name=matrix.name,
        baseline=base,
        tolerance=ctx.tolerance,
        records_evaluated=evaluated,
        harness_errors=harness_errors,
        ignored=ignored,
        warnings=tuple(warnings),
        cells=summaries,
        advisory=_advisory(ctx, judged, confidence, resamples, seed),
    )


def _median_int(values: Sequence[int]) -> float | None:
    m = median(values)
    return None if m is None else float(m)


def _summarize(config: str, recipe: str, inp: str, size: str, d: _CellData) -> CellSummary:
    return CellSummary(
        config=config,
        recipe=recipe,
        input=inp,
        size_class=size,
        runs=d.runs,
        harness_errors=d.harness_errors,
        valid=d.valid,
        succeeded=d.succeeded,
        outcomes=dict(d.outcomes),
        limit_hits=d.hits,
        limit_unknown=len(d.hit_null_ids),
        median_input_tokens=_median_int(d.tokens),
        median_output_tokens=_median_int(d.output_tokens),
        median_iterations=_median_int(d.iterations),
        median_duration_s=_median_float(d.durations),
        median_persisted=_median_int(d.persisted),
        median_reads=_median_int(d.reads),
        median_status_report_bytes=_median_int(d.report_bytes),
        quality_true=d.quality_true,
        quality_known=d.quality_known,
        leaks=len(d.leak_ids),
        leak_unknown=len(d.leak_unknown_ids),
    )
