"""The records of one stage grouped once by (configuration, recipe, input).

`group` makes the one pass over the records: every criterion, the per-cell
tables, the completeness check and the advisory statistics read the
`CellData` it fills. Records outside the matrix are counted in `ignored` by
reason, never silently dropped.

Duplicates (a documented rule): a record identical to one already seen for
the same (configuration, recipe, input, repetition) -- the same line twice --
is counted once and noted in the warnings. Records of the same run that
differ are all counted, with a warning (the records-file checks refuse them
before the evaluator sees them: `records_check.check_against_matrix`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from spillover_harness.plan.matrix import Matrix, Rule
from spillover_harness.results.records import RunRecord

Key = tuple[str, str, str]  # configuration, recipe, input
RunSlot = tuple[str, str, str, int]  # configuration, recipe, input, repetition
Cell = tuple[str, str, str]  # recipe, input, size_class (matrix order)


class CellData:
    """Everything the criteria need from one (configuration, recipe, input), in one pass."""

    __slots__ = (
        "clean",
        "completed_token_reps",
        "completed_tokens",
        "durations",
        "early_token_reps",
        "early_tokens",
        "harness_errors",
        "hit_null_ids",
        "hits",
        "inconsistent",
        "iterations",
        "leak_ids",
        "leak_unknown_ids",
        "outcomes",
        "output_tokens",
        "persisted",
        "quality_known",
        "quality_true",
        "reads",
        "rep_values",
        "report_bytes",
        "runs",
        "succeeded",
        "unfinished_ids",
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
        # input_tokens of the completed (`succeeded`) runs, and of the runs that ended
        # early (failed, aborted, timed out: the context overflowed, a timeout), with the
        # repetition of each value (for pairing); `tokens` chooses between them
        self.completed_tokens: list[int] = []
        self.completed_token_reps: list[int] = []
        self.early_tokens: list[int] = []
        self.early_token_reps: list[int] = []
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
        # (run id, why) of the runs whose consistency check broke (consistency_ok false)
        self.inconsistent: list[tuple[str, str]] = []
        # runs that never finished: the mcp-host was OOM-killed under them, or the harness
        # could not run or observe them (`completeness.never_finished`)
        self.unfinished_ids: list[str] = []
        # per repetition of a valid run: (succeeded, hit the limit, quality_ok,
        # input_tokens), so the runs of one seed can be compared across configurations
        # (`reproducibility`)
        self.rep_values: dict[int, tuple[bool, bool | None, bool | None, int | None]] = {}

    def add(self, r: RunRecord) -> None:
        self.runs += 1
        memory = r.mcp_host_memory
        killed = memory is not None and (memory.oom_kills or 0) > 0
        if killed or r.outcome == "harness_error":
            self.unfinished_ids.append(r.run_id)
        if r.consistency_ok is False:
            why = "; ".join(
                n.removeprefix("consistency: ") for n in r.notes if n.startswith("consistency:")
            )
            self.inconsistent.append((r.run_id, why or "consistency check failed"))
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
        if r.input_tokens is not None and outcome == "succeeded":
            self.completed_tokens.append(r.input_tokens)
            self.completed_token_reps.append(r.repetition)
        elif r.input_tokens is not None:
            self.early_tokens.append(r.input_tokens)
            self.early_token_reps.append(r.repetition)
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
        self.rep_values[r.repetition] = (outcome == "succeeded", hit, r.quality_ok, r.input_tokens)
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

    @property
    def tokens_lower_bound(self) -> bool:
        """True when no completed run has input_tokens known and `tokens` falls back to
        the runs that ended early: each is a lower bound of what a finished run spends."""
        return not self.completed_tokens and bool(self.early_tokens)

    @property
    def tokens(self) -> list[int]:
        """The input_tokens criterion 3 compares (docs/reference.md §3): the completed
        runs' (a run cut short stopped spending tokens, so counting it would flatter the
        side that died more), or, when none completed, the runs that ended early."""
        return self.early_tokens if self.tokens_lower_bound else self.completed_tokens

    @property
    def token_reps(self) -> list[int]:
        """The repetition of each `tokens` value (for pairing)."""
        return self.early_token_reps if self.tokens_lower_bound else self.completed_token_reps

    @property
    def tokens_left_out(self) -> int:
        """Runs with input_tokens known that `tokens` leaves out (ended early while
        completed runs exist)."""
        return 0 if self.tokens_lower_bound else len(self.early_tokens)

    @classmethod
    def merged(cls, parts: Iterable[CellData]) -> CellData:
        """Several cells as one (criterion 4 takes a recipe's inputs together)."""
        out = cls()
        for d in parts:
            out.runs += d.runs
            out.harness_errors += d.harness_errors
            out.valid += d.valid
            out.succeeded += d.succeeded
            for outcome, count in d.outcomes.items():
                out.outcomes[outcome] = out.outcomes.get(outcome, 0) + count
            out.hits += d.hits
            out.hit_null_ids.extend(d.hit_null_ids)
            out.completed_tokens.extend(d.completed_tokens)
            out.completed_token_reps.extend(d.completed_token_reps)
            out.early_tokens.extend(d.early_tokens)
            out.early_token_reps.extend(d.early_token_reps)
            out.output_tokens.extend(d.output_tokens)
            out.iterations.extend(d.iterations)
            out.durations.extend(d.durations)
            out.persisted.extend(d.persisted)
            out.reads.extend(d.reads)
            out.report_bytes.extend(d.report_bytes)
            out.quality_true += d.quality_true
            out.quality_known += d.quality_known
            out.clean += d.clean
            out.leak_ids.extend(d.leak_ids)
            out.leak_unknown_ids.extend(d.leak_unknown_ids)
            out.inconsistent.extend(d.inconsistent)
            out.unfinished_ids.extend(d.unfinished_ids)
        return out


@dataclass(frozen=True)
class Context:
    """What a criterion judges a configuration with."""

    baseline: str
    target: int  # valid runs per cell the stage plans
    tolerance: Fraction
    cells: tuple[Cell, ...]
    quality_recipes: tuple[str, ...]
    data: dict[Key, CellData]
    # Runs of one (recipe, input, repetition) met the same seeded agent (stage sim): the
    # advisory may pair them. On a cluster stage the agent is a real model, unseeded.
    seeded: bool = True
    # Opt-in rules per criterion (matrix acceptance.rules; absent: literal).
    rules: Mapping[str, Rule] = field(default_factory=dict)

    def rule(self, criterion: str) -> Rule | None:
        """The opt-in rule judging `criterion`, None when it is judged literally."""
        rule = self.rules.get(criterion)
        return rule if rule is not None and rule.rule != "literal" else None

    def get(self, config: str, recipe: str, input_name: str) -> CellData:
        return self.data[(config, recipe, input_name)]


@dataclass
class Grouped:
    """The one pass over the records: the cells' data and what was left out or odd."""

    data: dict[Key, CellData]
    present: set[RunSlot] = field(default_factory=set)  # runs recorded (harness_error too)
    ignored: dict[str, int] = field(default_factory=dict)  # reason -> count
    warnings: list[str] = field(default_factory=list)
    evaluated: int = 0


def group(records: Sequence[RunRecord], matrix: Matrix, stage: str | None) -> Grouped:
    """Group the stage's records by (configuration, recipe, input); count the rest."""
    config_names = [c.name for c in matrix.configurations]
    declared = {(r.name, i.name): i.size_class for r, i in matrix.cells()}
    out = Grouped(
        data={
            (cfg, recipe.name, inp.name): CellData()
            for cfg in config_names
            for recipe, inp in matrix.cells()
        }
    )
    ignored = out.ignored
    size_mismatch: dict[tuple[str, str, str], int] = {}
    first_of: dict[RunSlot, RunRecord] = {}
    identical = conflicting = 0
    seen_ids: set[str] = set()
    duplicate_ids = 0
    for r in records:
        if r.stage != stage:
            why = f"stage {r.stage!r} (evaluating {stage!r})"
            ignored[why] = ignored.get(why, 0) + 1
            continue
        cell = out.data.get((r.config, r.recipe, r.input))
        if cell is None:
            if r.config not in config_names:
                why = f"configuration {r.config!r} not in the matrix"
            else:
                why = f"cell {r.recipe}/{r.input} not in the matrix"
            ignored[why] = ignored.get(why, 0) + 1
            continue
        slot = (r.config, r.recipe, r.input, r.repetition)
        first = first_of.get(slot)
        if first is None:
            first_of[slot] = r
        elif first == r:
            identical += 1  # the same line twice: the run counts once
            continue
        else:
            conflicting += 1
        out.evaluated += 1
        cell.add(r)
        if r.size_class != declared[(r.recipe, r.input)]:
            mk = (r.recipe, r.input, r.size_class)
            size_mismatch[mk] = size_mismatch.get(mk, 0) + 1
        if r.run_id in seen_ids:
            duplicate_ids += 1
        else:
            seen_ids.add(r.run_id)
    out.present = set(first_of)

    warnings = out.warnings
    for (recipe, inp, size), count in sorted(size_mismatch.items()):
        warnings.append(
            f"{count} record(s) of {recipe}/{inp} say size_class {size!r}; the matrix declares "
            f"{declared[(recipe, inp)]!r}, which the evaluation uses"
        )
    if identical:
        warnings.append(
            f"{identical} record(s) are exact copies of a run already recorded (the same "
            "line twice); each run was counted once"
        )
    if conflicting:
        warnings.append(
            f"{conflicting} record(s) repeat a (configuration, recipe, input, repetition) "
            "already recorded with different content; all of them were counted"
        )
    if duplicate_ids:
        warnings.append(f"{duplicate_ids} record(s) repeat a run_id already recorded")
    return out
