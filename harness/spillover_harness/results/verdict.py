"""The verdict, one pydantic schema: what `evaluate` returns and `verdict.json` holds.

`Verdict.to_json()` is the content of `verdict.json`. Figures the criteria
compare are exact `Fraction`s in Python and plain JSON numbers in the file
(an int when whole, else a float). Fields marked `exclude=True` are for the
report and the CLI only and are not written to the file; `matrix_name` is
written as `matrix`.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_serializer,
)

Status = Literal["pass", "fail", "inconclusive"]
PASS: Status = "pass"
FAIL: Status = "fail"
INCONCLUSIVE: Status = "inconclusive"

DECISION_INCONCLUSIVE = "inconclusive"

# The five criteria of docs/reference.md §3, in the order the reference numbers them.
CRITERIA: tuple[str, ...] = (
    "success_rate",
    "iteration_limit",
    "input_tokens",
    "summary_quality",
    "no_leak",
)

Number = int | float


def json_number(value: Fraction | None) -> Number | None:
    """A fraction as a JSON number: an int when whole, else a float."""
    if value is None:
        return None
    if value.denominator == 1:
        return int(value.numerator)
    return float(value)


ExactNumber = Annotated[Fraction, PlainSerializer(json_number)]


class _Schema(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        """The object as `verdict.json` writes it."""
        return self.model_dump(mode="json", by_alias=True)


class RunsNeeded(_Schema):
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


class CellEvidence(_Schema):
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
    value: ExactNumber | None
    baseline_value: ExactNumber | None
    limit: ExactNumber | None
    comparison: str
    n: int
    n_baseline: int | None
    harness_errors: int
    harness_errors_baseline: int | None
    counts: dict[str, int]
    baseline_counts: dict[str, int] | None = None
    reason: str
    # How far the difference could be noise (evaluate.noise): never changes `status`.
    p_value: float | None = None
    interval: tuple[float, float] | None = None  # rates: the configuration's exact 95%
    # The rule that gave `status` (matrix acceptance.rules) and, when it is not the
    # literal one, the literal rule's status of the same cell (None otherwise).
    rule: str = "literal"
    literal_status: Status | None = None
    # Whether the configuration stored at least one result (spillover_persisted > 0) in
    # the cell's runs: a pass where it stored nothing says only that nothing changed.
    # None: no run of the cell recorded the count.
    exercised: bool | None = None

    @property
    def label(self) -> str:
        return (
            f"{self.recipe}/{self.input}"
            if self.input is not None
            else f"{self.recipe} (all inputs)"
        )


class CriterionResult(_Schema):
    """One criterion for one configuration: its status, rule, reason and evidence."""

    key: str = Field(exclude=True)
    status: Status
    rule: str
    reason: str
    tolerance: Fraction | None = None  # input_tokens only; written as a float, else left out
    cells: tuple[CellEvidence, ...]
    runs_needed: tuple[RunsNeeded, ...] = Field(default=(), exclude=True)

    @field_serializer("tolerance")
    def _tolerance_as_float(self, value: Fraction | None) -> float | None:
        return None if value is None else float(value)

    @model_serializer(mode="wrap")
    def _without_absent_tolerance(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if self.tolerance is None and isinstance(data, dict):
            data.pop("tolerance", None)
        return data


class ConfigVerdict(_Schema):
    """A configuration judged against the baseline on every criterion."""

    name: str = Field(exclude=True)
    verdict: Status
    criteria: dict[str, CriterionResult]  # in CRITERIA order
    reason: str = Field(exclude=True)
    runs: int = Field(exclude=True)  # records of this configuration in the matrix's cells
    harness_errors: int = Field(exclude=True)
    runs_needed: tuple[RunsNeeded, ...] = Field(exclude=True)
    # "run id: why" of the runs (this configuration's and the baseline's) whose
    # consistency check broke: the configuration cannot pass (checks/consistency.py)
    consistency: tuple[str, ...] = Field(default=(), exclude=True)

    @property
    def unexercised(self) -> tuple[str, ...]:
        """The cells (recipe/input, matrix order) where the configuration stored no result
        in any run: its passes there say only that nothing changed."""
        seen: dict[str, bool] = {}
        for result in self.criteria.values():
            for ev in result.cells:
                if ev.input is not None and ev.exercised is not None:
                    where = f"{ev.recipe}/{ev.input}"
                    seen[where] = seen.get(where, False) or ev.exercised
        return tuple(where for where, used in seen.items() if not used)


def unexercised_note(config: ConfigVerdict) -> str | None:
    """`128KiB stored no result on code-review/small, ...: its passes there say only
    that nothing changed`, or None when it stored one in every cell."""
    cells = config.unexercised
    if not cells:
        return None
    return (
        f"{config.name} stored no result on {', '.join(cells)}: its passes there say only "
        "that nothing changed (the inputs never reached its threshold)"
    )


class CellSummary(_Schema):
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


Method = Literal["paired", "independent"]


class TokenRatio(_Schema):
    """Advisory: a cell's input-token ratio and its bootstrap CI.

    `ratio` is median(config) / median(baseline), the criterion's view.
    `method` says which bootstrap gave `ci`: `paired` (runs of the same seed
    and input on both sides, `pairs` of them; the CI is that of the median
    per-pair ratio, `paired_ratio`) or `independent` (each side resampled on
    its own; the CI is that of `ratio`). `identical` is true when every pair
    has the same figure on both sides: more runs cannot change anything, so
    no runs-needed hint is given.
    """

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
    reading: str  # clear pass | clear fail | close call | leans pass | leans fail | no data
    runs_to_resolve: int | None
    hint: str
    method: Method
    pairs: int
    paired_ratio: float | None
    identical: bool


ADVISORY_NOTE = "advisory only: never changes a status or the decision"


class Advisory(_Schema):
    """Statistics for the reader; they never change a status or the decision."""

    note: str = ADVISORY_NOTE
    confidence: float
    resamples: int
    seed: int
    token_ratios: tuple[TokenRatio, ...]
    hints: tuple[str, ...]


class FlippingCell(_Schema):
    """A unit whose status, drawn again, most often goes with another decision: where
    more repetitions would settle the decision. `share`: of the resamples deciding
    otherwise, the fraction in which this unit's status differs from the observed one."""

    config: str
    criterion: str
    recipe: str
    input: str | None  # None: every input of the recipe together (summary_quality)
    share: float

    @property
    def label(self) -> str:
        where = f"{self.recipe}/{self.input}" if self.input else f"{self.recipe} (all inputs)"
        return f"{self.config} {self.criterion} {where}"


class Stability(_Schema):
    """How often the literal decision comes out the same when each cell's runs are drawn
    again (evaluate.stability). `decision`: the fraction of resamples giving the observed
    decision; `distribution`: every decision reached, with its fraction."""

    decision: float
    distribution: dict[str, float]
    resamples: int
    seed: int
    method: str
    flipping_cells: tuple[FlippingCell, ...]


class Reproducibility(_Schema):
    """The probability that a fresh stage of the same design (matrix, stage, repetitions,
    rule) reaches the same decision (evaluate.reproducibility): `decision` (None: not
    drawn, e.g. no configuration was judged), every decision's probability
    (`distribution`), and the cells whose fresh runs most often go with another decision
    (`cells`: where more runs would most change the figure). `paired`: whether the stage
    pairs runs across configurations (`paired_why`); `paired_cells`: the configuration
    cells drawn as the baseline's because their runs equal it seed for seed."""

    decision: float | None
    distribution: dict[str, float]
    method: str
    paired: bool
    paired_why: str
    draws: int
    seed: int
    cells: tuple[FlippingCell, ...]
    paired_cells: tuple[str, ...] = ()


class IncompleteCell(_Schema):
    """Runs of one (configuration, recipe, input) the stage plans but the records lack."""

    config: str
    recipe: str
    input: str
    expected: int
    recorded: int
    missing: int
    missing_repetitions: tuple[int, ...]


class Incomplete(_Schema):
    """The stage's records lack runs of its plan (configurations x cells x repetitions).

    A `harness_error` record is a run that exists. `judged` is true when the
    criteria judged what is there anyway (allow_incomplete); otherwise the
    decision is `inconclusive` and no configuration is judged.
    """

    reason: str  # "incomplete: N of M runs missing"
    expected: int
    recorded: int
    missing: int
    judged: bool
    cells: tuple[IncompleteCell, ...]  # only the cells with runs missing, in matrix order


ClaimReading = Literal["within", "above", "not measured"]
LeakReading = Literal["none", "leak", "not measured"]


class MemoryConfig(_Schema):
    """One configuration's memory against the baseline's (docs/reference.md §3.6).
    A figure is null when it is not measured; `reasons` then says why, by figure."""

    peak_bytes: int | None
    limit_bytes: int | None
    ratio_to_baseline: ExactNumber | None
    headroom_executions: int | None
    leak_bytes: int | None
    # the lane's fit: what one more execution at once adds to the peak (bytes)
    per_execution_bytes: int | None = None
    # the largest N the lane measured: a headroom above it is a line extrapolated
    lane_max_executions: int | None = None
    runs_compared: int = 0  # its completed runs in the cells both sides completed
    runs_left_out: int = 0  # its runs that ended failed, aborted or timed_out
    # the store's own bytes over the bytes of the results it held, at its fullest run
    # that filled the budget, and that against the PR's claim; the leak against its
    # tolerance (docs/reference.md §3.6)
    store_ratio: ExactNumber | None = None
    claim: ClaimReading = "not measured"
    leak: LeakReading = "not measured"
    reasons: dict[str, str] = {}


class MemoryCheck(_Schema):
    """Memory as a check, per configuration against the baseline on the same cells
    (docs/reference.md §3.6). `source` says whether the figures were measured (a cluster
    stage) or modelled (the simulator: its baseline, limit and store overhead are the
    model's inputs). `claim_ratio` is the PR's claim, a reference line only."""

    source: Literal["measured", "modelled"]
    baseline: str
    claim_ratio: ExactNumber
    claim: str
    comparison: str
    headroom_method: str
    leak_method: str
    lane_problem: str | None = None
    configs: dict[str, MemoryConfig]
    # `claim` reads `above` past this store ratio ("about +7%": up to +7.5%); `leak`
    # reads `leak` past this many bytes (0 modelled; a measured working set moves by a
    # few MiB between samples without leaking)
    claim_limit: ExactNumber = Fraction(1075, 1000)
    leak_tolerance_bytes: int = 0


class StatusReportConfig(_Schema):
    """One configuration's status report against the baseline's (docs/reference.md
    §3.7): its largest growth per stored result over the cells, and where."""

    reading: Literal["flat", "grows", "not measured"]
    bytes_per_stored_result: ExactNumber | None = None
    cell: str | None = None
    reason: str | None = None  # why not measured


class StatusReportCheck(_Schema):
    """Whether the status report grows with the results stored (report/
    status_report_check.py); it changes no criterion and not the decision."""

    baseline: str
    limit_bytes_per_stored_result: int
    method: str
    configs: dict[str, StatusReportConfig]


class Verdict(_Schema):
    """The verdict of one stage (docs/reference.md §3-4)."""

    # "131072" | "32768" | "false" (the matrix's chain) | "inconclusive"
    decision: str
    decision_reason: str
    # True when `decision` is one of `decision_values` (a decision was reached),
    # False when it is "inconclusive": callers read this, never the values.
    decided: bool
    decision_values: tuple[str, ...]  # the chain's defaults, then its fallback
    incomplete: Incomplete | None  # None: every run the stage plans is recorded
    stage: str | None  # None only when there was no record to evaluate
    matrix_name: str = Field(serialization_alias="matrix")
    baseline: str
    configs: dict[str, ConfigVerdict]  # every non-baseline configuration, in matrix order
    runs_needed: tuple[RunsNeeded, ...]
    records_evaluated: int  # records of the stage in the matrix's configurations and cells
    harness_errors: dict[str, int]  # per configuration, baseline included
    ignored: dict[str, int]  # reason -> count
    warnings: tuple[str, ...]
    cells: tuple[CellSummary, ...]
    advisory: Advisory
    tolerance: Fraction = Field(exclude=True)
    # Per configuration (baseline included, matrix order): the spillover variables it
    # sets, verbatim from the matrix ({}: none, the platform's defaults), so a reader
    # sees what `off` or `32KiB` really ran with. Absent from an older verdict.json.
    config_env: dict[str, dict[str, str]] = {}
    # How often the decision comes out the same with each cell's runs drawn again
    # (evaluate.stability). Absent from an older verdict.json.
    stability: Stability | None = None
    # The probability that a fresh stage of this design decides the same
    # (evaluate.reproducibility): the headline figure. Absent from an older verdict.json.
    reproducibility: Reproducibility | None = None
    # The opt-in rules that judged criteria (criterion -> rule; {}: all literal), and
    # the decision the literal rule would reach then (None when all were literal).
    rules: dict[str, str] = {}
    literal_decision: str | None = None
    # Memory as a check (`memory_check`): None when no record carries memory figures
    # and no lane ran. Absent from an older verdict.json.
    memory: MemoryCheck | None = None
    # The status report as a check (`status_report_check`): None when no record carries
    # its size. Absent from an older verdict.json.
    status_report: StatusReportCheck | None = None

    @property
    def ignored_total(self) -> int:
        return sum(self.ignored.values())

    @field_serializer("ignored")
    def _ignored_with_total(self, value: dict[str, int]) -> dict[str, Any]:
        return {"total": sum(value.values()), "by_reason": dict(value)}
