"""Is every run the stage plans recorded? Checked before any criterion. And did any
run of each configuration finish on its own? Checked before a decision is taken.

The plan is the matrix's configurations x (recipe, input) cells x the
cell's repetitions in the stage (1..N: the stage's, or more where the stage was
extended by `run --until-stable`). A run is recorded when a record of the stage has
its (configuration, recipe, input, repetition), whatever its outcome: a
`harness_error` record is a run that exists (it is left out of the criteria,
not missing). Records beyond the plan do not fill a gap.
"""

from __future__ import annotations

from collections.abc import Sequence

from spillover_harness.evaluate.context import Context, RunSlot
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.verdict import CRITERIA, Incomplete, IncompleteCell, RunsNeeded


def check_complete(
    matrix: Matrix, stage: str, present: set[RunSlot], *, judged: bool
) -> Incomplete | None:
    """The runs of the stage's plan the records lack, per cell; None when none is missing."""
    cells: list[IncompleteCell] = []
    expected = missing = 0
    for config in matrix.configurations:
        for recipe, spec in matrix.cells():
            reps = matrix.repetitions_for(stage, recipe.name, spec.name)
            expected += reps
            absent = tuple(
                rep
                for rep in range(1, reps + 1)
                if (config.name, recipe.name, spec.name, rep) not in present
            )
            if absent:
                missing += len(absent)
                cells.append(
                    IncompleteCell(
                        config=config.name,
                        recipe=recipe.name,
                        input=spec.name,
                        expected=reps,
                        recorded=reps - len(absent),
                        missing=len(absent),
                        missing_repetitions=absent,
                    )
                )
    if not missing:
        return None
    # matrix order is configuration-major; the tables read better cell-major
    order = {(r.name, i.name): n for n, (r, i) in enumerate(matrix.cells())}
    cells.sort(key=lambda c: order[(c.recipe, c.input)])
    return Incomplete(
        reason=f"incomplete: {missing} of {expected} runs missing",
        expected=expected,
        recorded=expected - missing,
        missing=missing,
        judged=judged,
        cells=tuple(cells),
    )


def missing_as_runs_needed(incomplete: Incomplete) -> tuple[RunsNeeded, ...]:
    """The missing runs in the shape of `Verdict.runs_needed` (every criterion needs them)."""
    return tuple(
        RunsNeeded(
            config=c.config,
            recipe=c.recipe,
            input=c.input,
            runs=c.missing,
            criteria=CRITERIA,
            reason=(
                f"incomplete: repetition(s) {', '.join(map(str, c.missing_repetitions))} of "
                f"{c.expected} not recorded"
            ),
        )
        for c in incomplete.cells
    )


def never_finished(ctx: Context, configs: Sequence[str]) -> tuple[RunsNeeded, ...]:
    """The cells of every configuration none of whose runs finished on its own (each
    one OOM-killed or a harness error): empty when each has one.

    Such a configuration was never measured: comparing it (or comparing against it,
    for the baseline) would turn a crashing mcp-host into a decisive `false` or
    default, so the decision is `inconclusive` until runs of it finish."""
    needs: list[RunsNeeded] = []
    for config in configs:
        cells = [(r, i, ctx.get(config, r, i)) for r, i, _ in ctx.cells]
        if not any(d.runs for _, _, d in cells):
            continue  # nothing recorded: the cells are missing, which the criteria ask for
        if any(len(d.unfinished_ids) < d.runs for _, _, d in cells):
            continue  # some run finished
        needs.extend(
            RunsNeeded(
                config=config,
                recipe=recipe,
                input=inp,
                runs=max(d.runs, ctx.target),
                criteria=CRITERIA,
                reason=(
                    f"no run of {config} finished: each was OOM-killed or a harness "
                    "error; fix the cause (e.g. the mcp-host's memory limit), "
                    "then run these again"
                ),
                rerun_ids=tuple(d.unfinished_ids),
            )
            for recipe, inp, d in cells
        )
    return tuple(needs)
