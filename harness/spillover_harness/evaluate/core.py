"""`evaluate`: run records + matrix -> the verdict of docs/reference.md §3-4. Pure.

Order of the work: group the records once (`context.group`), check that
every run the stage plans is recorded (`completeness`), judge every
non-baseline configuration on the five criteria (`criteria`, `decide`),
walk the decision chain, then the per-cell tables and the advisory
statistics (which never change a status or the decision).

Interpretations where the reference is silent (each visible in the evidence):
harness_error runs are left out of every criterion and counted; records
outside the matrix's configurations and cells are counted in `ignored`; a
cell with no valid run on a side the criterion looks at is inconclusive;
"too few valid runs" means none (fewer than planned is only a hint); the
null rules of criteria 2 and 5 are in their modules.

Stages are never mixed: with `stage=None` the records must hold one stage
(else ValueError); with `stage=...` only that stage's records are evaluated
and the others are counted in `ignored`.

Completeness: when runs of the stage's plan are missing, the decision is
`inconclusive` ("incomplete: N of M runs missing", listed per cell in
`Verdict.incomplete` and `runs_needed`) and no configuration is judged --
unless `allow_incomplete`, when the criteria judge what is there and the
verdict says it was judged incomplete.

Runs that never finished: when no run of a configuration (the baseline included)
finished (each OOM-killed or a harness error), the
decision is `inconclusive` whatever the criteria say (`completeness.never_finished`):
a crashing mcp-host is not evidence for or against a configuration.

`Verdict.runs_needed` is set only when the decision is `inconclusive`: the
runs that would let the configuration that stopped the chain be judged (a
missing or all-harness_error cell asks for the stage's planned repetitions;
a recorded null asks to redo those runs), or the missing runs of an
incomplete stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction

from spillover_harness.evaluate.advisory import advisory
from spillover_harness.evaluate.cells import summarize
from spillover_harness.evaluate.completeness import (
    check_complete,
    missing_as_runs_needed,
    never_finished,
)
from spillover_harness.evaluate.context import Context, group
from spillover_harness.evaluate.decide import Decision, decide, decision_values, judge_config
from spillover_harness.evaluate.reproducibility import DRAWS as REPRODUCIBILITY_DRAWS
from spillover_harness.evaluate.reproducibility import reproducibility
from spillover_harness.evaluate.stability import RESAMPLES as STABILITY_RESAMPLES
from spillover_harness.evaluate.stability import stability
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.records import STAGES, RunRecord
from spillover_harness.results.verdict import (
    DECISION_INCONCLUSIVE,
    Advisory,
    ConfigVerdict,
    Reproducibility,
    RunsNeeded,
    Stability,
    Verdict,
)


def _stage_of(records: Sequence[RunRecord], stage: str | None) -> str | None:
    if stage is not None and stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r} (known: {', '.join(STAGES)})")
    if stage is not None:
        return stage
    stages = sorted({r.stage for r in records})
    if len(stages) > 1:
        raise ValueError(
            f"the records hold several stages ({', '.join(stages)}); a verdict is for "
            "one stage: evaluate them separately (pass stage=...)"
        )
    return stages[0] if stages else None


def evaluate(
    records: Sequence[RunRecord],
    matrix: Matrix,
    *,
    stage: str | None = None,
    allow_incomplete: bool = False,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    stability_resamples: int = STABILITY_RESAMPLES,
    reproducibility_draws: int = REPRODUCIBILITY_DRAWS,
) -> Verdict:
    """Judge the records of one stage against the matrix (docs/reference.md §3). Pure.

    With `stage=None` the records must all be of one stage (ValueError
    otherwise); with a stage, the records of other stages are ignored and
    counted. When runs the stage plans are missing the decision is
    `inconclusive` unless `allow_incomplete` (then the criteria judge what is
    there and `verdict.incomplete.judged` says so). `confidence`, `resamples`
    and `seed` drive the advisory bootstrap; `stability_resamples` and `seed` the
    decision's stability (`evaluate.stability`); `reproducibility_draws` and `seed` the
    probability that a fresh stage decides the same (`evaluate.reproducibility`). None
    of them changes the decision.
    """
    stage = _stage_of(records, stage)
    base = matrix.acceptance.baseline
    config_names = [c.name for c in matrix.configurations]
    cell_list = tuple((r.name, i.name, i.size_class) for r, i in matrix.cells())
    grouped = group(records, matrix, stage)
    data = grouped.data

    incomplete = (
        check_complete(matrix, stage, grouped.present, judged=allow_incomplete)
        if stage is not None
        else None
    )
    target = matrix.repetitions.for_stage(stage) if stage is not None else 1
    tolerance = Fraction(repr(matrix.acceptance.token_tolerance))
    ctx = Context(
        baseline=base,
        target=target,
        tolerance=tolerance,
        cells=cell_list,
        quality_recipes=tuple(matrix.acceptance.quality_recipes),
        data=data,
        seeded=stage == "sim",
        rules=dict(matrix.acceptance.rules),
    )
    judged = [name for name in config_names if name != base]
    configs: dict[str, ConfigVerdict] = {}
    literal_decision: str | None = None  # set when an opt-in rule judged a criterion
    dead: tuple[RunsNeeded, ...] = ()  # the cells of configurations no run of which finished
    if incomplete is not None and not allow_incomplete:
        decision = Decision(
            DECISION_INCONCLUSIVE,
            f"{incomplete.reason}: no configuration is judged until they are recorded",
            False,
            missing_as_runs_needed(incomplete),
        )
        advice = Advisory(
            confidence=confidence, resamples=resamples, seed=seed, token_ratios=(), hints=()
        )
    else:
        configs = {name: judge_config(ctx, name) for name in judged}
        decision = decide(matrix, configs)
        if ctx.rules and any(ctx.rule(key) for key in ctx.rules):
            literally = replace(ctx, rules={})
            literal_decision = decide(
                matrix, {name: judge_config(literally, name) for name in judged}
            ).value
        dead = never_finished(ctx, config_names)
        if dead:
            names = [n for n in config_names if any(d.config == n for d in dead)]
            decision = Decision(
                DECISION_INCONCLUSIVE,
                f"no run of {', '.join(names)} finished (each was OOM-killed or a harness "
                "error): nothing of it was measured, so no decision is "
                "taken; fix the cause (e.g. the mcp-host's memory limit) and run them again",
                False,
                dead,
            )
        if incomplete is not None:
            decision = Decision(
                decision.value,
                f"judged on incomplete data ({incomplete.missing} of {incomplete.expected} "
                f"runs missing): {decision.reason}",
                decision.decided,
                decision.runs_needed,
            )
        advice = advisory(ctx, judged, confidence, resamples, seed)
    if dead:  # resampling runs that never finished cannot make them finish
        steady = Stability(
            decision=1.0,
            distribution={decision.value: 1.0},
            resamples=0,
            seed=seed,
            method="not resampled: no run of a configuration finished",
            flipping_cells=(),
        )
        fresh = Reproducibility(
            decision=None,
            distribution={},
            method="not drawn: no run of a configuration finished",
            paired=ctx.seeded,
            paired_why="",
            draws=0,
            seed=seed,
            cells=(),
        )
    else:
        steady = stability(
            ctx, matrix, configs, decision.value, resamples=stability_resamples, seed=seed
        )
        fresh = reproducibility(
            ctx, matrix, configs, decision.value, draws=reproducibility_draws, seed=seed
        )
    return Verdict(
        decision=decision.value,
        decision_reason=decision.reason,
        decided=decision.decided,
        decision_values=decision_values(matrix),
        incomplete=incomplete,
        stage=stage,
        matrix_name=matrix.name,
        baseline=base,
        configs=configs,
        runs_needed=decision.runs_needed,
        records_evaluated=grouped.evaluated,
        harness_errors={
            name: sum(data[(name, r, i)].harness_errors for r, i, _ in cell_list)
            for name in config_names
        },
        ignored=grouped.ignored,
        warnings=tuple(grouped.warnings),
        cells=tuple(
            summarize(name, recipe, inp, size, data[(name, recipe, inp)])
            for recipe, inp, size in cell_list
            for name in config_names
        ),
        advisory=advice,
        tolerance=tolerance,
        config_env={c.name: dict(c.env) for c in matrix.configurations},
        stability=steady,
        reproducibility=fresh,
        rules={k: r.rule for k, r in matrix.acceptance.rules.items() if r.rule != "literal"},
        literal_decision=literal_decision,
    )
