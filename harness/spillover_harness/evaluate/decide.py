"""A configuration's verdict from its five criteria, and the decision chain (docs/reference.md §3).

A configuration fails if any criterion fails, is inconclusive if none fails
and one is inconclusive, else passes. The chain is walked in the matrix's
order: the first configuration that passes gives its default; a failing one
passes the turn on; an inconclusive one stops the chain (decision
`inconclusive`, with the runs that would let it be judged). When every
configuration of the chain fails, the decision is the fallback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spillover_harness.evaluate.context import Context, Key
from spillover_harness.evaluate.criteria import ALL_CRITERIA
from spillover_harness.evaluate.walker import combine
from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.verdict import (
    DECISION_INCONCLUSIVE,
    FAIL,
    INCONCLUSIVE,
    PASS,
    ConfigVerdict,
    RunsNeeded,
)


def decision_values(matrix: Matrix) -> tuple[str, ...]:
    """The decisions the matrix can reach: the chain's defaults, then its fallback."""
    values = [step.default for step in matrix.decision.chain]
    values.append(matrix.decision.fallback)
    return tuple(dict.fromkeys(values))


def merge_needs(needs: Sequence[RunsNeeded]) -> tuple[RunsNeeded, ...]:
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
            config=need.config,
            recipe=need.recipe,
            input=need.input,
            runs=max(prev.runs, need.runs),
            criteria=criteria,
            reason=reasons,
            rerun_ids=ids,
        )
    return tuple(merged.values())


def inconsistent_runs(ctx: Context, config: str) -> tuple[str, ...]:
    """ "run id: why" of the runs of `config` and of the baseline whose consistency
    check broke (the platform did not do what the configuration says)."""
    names = [config] if config == ctx.baseline else [config, ctx.baseline]
    return tuple(
        f"{run_id}: {why}"
        for name in names
        for r, i, _ in ctx.cells
        for run_id, why in ctx.get(name, r, i).inconsistent
    )


def judge_config(ctx: Context, config: str) -> ConfigVerdict:
    criteria = {c.key: c.judge(ctx, config) for c in ALL_CRITERIA}
    verdict = combine([c.status for c in criteria.values()])
    if verdict == PASS:
        reason = "passes every criterion"
    else:
        bad = [c for c in criteria.values() if c.status == verdict]
        reason = "; ".join(f"{c.key}: {c.reason}" for c in bad)
    broken = inconsistent_runs(ctx, config)
    if broken:
        # The runs may not be of the configuration they claim: it cannot pass.
        shown = "; ".join(broken[:5]) + ("; ..." if len(broken) > 5 else "")
        said = f"consistency: {len(broken)} run(s) show the platform not doing what the "
        said += f"configuration says ({shown})"
        if verdict != FAIL:
            verdict, reason = INCONCLUSIVE, said
        else:
            reason = f"{reason}; {said}"
    runs = sum(ctx.get(config, r, i).runs for r, i, _ in ctx.cells)
    errors = sum(ctx.get(config, r, i).harness_errors for r, i, _ in ctx.cells)
    needs = merge_needs([n for c in criteria.values() for n in c.runs_needed])
    return ConfigVerdict(
        name=config,
        verdict=verdict,
        criteria=criteria,
        reason=reason,
        runs=runs,
        harness_errors=errors,
        runs_needed=needs,
        consistency=broken,
    )


@dataclass(frozen=True)
class Decision:
    value: str
    reason: str
    decided: bool  # False: inconclusive
    runs_needed: tuple[RunsNeeded, ...] = ()


def decide(matrix: Matrix, configs: Mapping[str, ConfigVerdict]) -> Decision:
    base = matrix.acceptance.baseline
    said: list[str] = []
    for step in matrix.decision.chain:
        cv = configs[step.config]
        if cv.verdict == PASS:
            said.append(f"{cv.name} passes every criterion against {base}")
            return Decision(
                step.default, "; ".join(said) + f": the default is {step.default}", True
            )
        if cv.verdict == FAIL:
            said.append(f"{cv.name} fails ({cv.reason})")
            continue
        said.append(f"{cv.name} is inconclusive ({cv.reason})")
        return Decision(
            DECISION_INCONCLUSIVE,
            "; ".join(said) + ": no decision until the runs needed are in",
            False,
            cv.runs_needed,
        )
    fallback = matrix.decision.fallback
    return Decision(
        fallback,
        "; ".join(said) + f": no configuration of the chain passes, the default is {fallback}",
        True,
    )
