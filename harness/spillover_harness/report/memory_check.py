"""Memory as a check (docs/reference.md §3.6): per configuration, against the baseline
on the same cells, the mcp-host's peak working set and its ratio to the baseline's;
the memory claim (the store's own bytes over the bytes of the results it held, at a run
that filled the budget: `within` or `above` the PR's about +7%); the headroom
(executions at once until the limit, from the concurrency lane at the worst cell) and
the leak (the working set after a block minus at its start, `none` or `leak`). Pure:
records and the lane in, `MemoryCheck` out; it never changes a criterion or the
decision.

Only completed runs are compared: a baseline run that died early (the context
overflowed, a timeout) held less than one that finished, so including it would
flatter the configuration. The runs left out are counted on each side; lane points
with an execution that ended early feed no headroom, for the same reason.

The claim is read on the store's own bytes, not the whole process's peak: over a
~160 MiB baseline, the store would have to add about 11 MiB per run for the process's
ratio to pass +7%, so that comparison could not fail. On the simulator every figure is
modelled: plan/memory_model.py's baseline, limit and store overhead are the model's
inputs, so the claim there restates the model (`--fault store-overhead` shows it can
read `above`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Literal

from spillover_harness.plan.matrix import Configuration, Matrix, effective_threshold
from spillover_harness.results.records import RunRecord
from spillover_harness.results.results_dir import LanePoint, MemoryLane
from spillover_harness.results.verdict import ClaimReading, LeakReading, MemoryCheck, MemoryConfig

__all__ = [
    "CLAIM_LIMIT",
    "PR_CLAIM_RATIO",
    "check_memory",
    "claim_text",
    "headroom",
    "headroom_text",
    "leak",
    "line_fit",
]

# The PR: a full 16 MiB budget costs about 7% more memory than the same results kept
# inline. The claim check compares the store's own bytes with the bytes of the results
# it holds, at a run that filled the budget: "about +7%" is up to +7.5%.
PR_CLAIM_RATIO = Fraction(107, 100)
CLAIM_LIMIT = Fraction(1075, 1000)
CLAIM = (
    "the PR's claim: the store takes about +7% over the bytes of the results it holds, "
    "at a full budget (within: up to +7.5%)"
)
MIB = 1024 * 1024
# A measured working set moves by a few MiB between two samples without leaking; the
# simulator's is exact.
LEAK_TOLERANCE_BYTES = {"measured": 4 * MIB, "modelled": 0}
DIED = ("failed", "aborted", "timed_out")
HEADROOM_METHOD = (
    "a least-squares line through the concurrency lane's (N, peak) points of the "
    "configuration, peak = a + b x N; headroom = the largest N with a + b x N <= the "
    "limit, i.e. floor((limit - a) / b); only points whose N executions all completed, "
    "and, with spillover on, only when the lane's cell filled the budget (the worst "
    "cell); null with fewer than two N or when the peak does not grow with N"
)
LEAK_METHOD = (
    "the working set at the end of a configuration block minus at its start, the "
    "largest over the configuration's blocks (the simulator: per execution); `leak` "
    "past the tolerance (modelled: 0; measured: 4 MiB), else `none`"
)


def line_fit(points: Sequence[tuple[int, int]]) -> tuple[Fraction, Fraction] | None:
    """(intercept, slope) of the least-squares line through (N, peak), exactly; None
    with fewer than two distinct N."""
    if len({n for n, _ in points}) < 2:
        return None
    k = len(points)
    mean_n = Fraction(sum(n for n, _ in points), k)
    mean_p = Fraction(sum(p for _, p in points), k)
    sxx = sum(((n - mean_n) ** 2 for n, _ in points), Fraction(0))
    sxy = sum(((n - mean_n) * (p - mean_p) for n, p in points), Fraction(0))
    slope = sxy / sxx
    return mean_p - slope * mean_n, slope


def headroom(points: Sequence[LanePoint]) -> tuple[int | None, int | None, str]:
    """(executions at once until the limit, bytes per execution, why null or how).
    Points with an execution that ended early are left out: it held less than one that
    completes, so a line through them would promise room that is not there."""
    if not points:
        return None, None, "no concurrency lane point for this configuration"
    cut = [p for p in points if p.ended_early]
    points = [p for p in points if not p.ended_early]
    if not points:
        ns = ", ".join(f"N = {p.executions}: {p.ended_early}" for p in cut)
        return (
            None,
            None,
            (
                f"every lane point had executions that ended early ({ns}): a run cut short "
                "holds less than one that completes"
            ),
        )
    fit = line_fit([(p.executions, p.peak_bytes) for p in points])
    ns = ", ".join(str(n) for n in sorted({p.executions for p in points}))
    if fit is None:
        return None, None, f"the lane measured one N only ({ns}): a line needs two"
    intercept, slope = fit
    if slope <= 0:
        return None, None, f"the peak does not grow with N over N = {ns}: nothing to extrapolate"
    limit = min(p.limit_bytes for p in points)
    room = max(0, math.floor((limit - intercept) / slope))
    how = (
        f"fit over N = {ns}: peak = {float(intercept) / 2**20:,.1f} MiB + "
        f"{float(slope) / 2**20:,.2f} MiB x N, limit {limit / 2**20:,.1f} MiB"
    )
    return room, round(slope), how


def headroom_text(m: MemoryConfig, *, unit: bool = True) -> str:
    """The headroom for people: a figure past the largest N the lane measured is marked
    extrapolated (a line through a few points says little about 100 executions).
    `unit` False: the bare count, for a column that names the unit."""
    if m.headroom_executions is None:
        return "not measured"
    text = f"{m.headroom_executions}" + (" execution(s) at once" if unit else "")
    tested = m.lane_max_executions
    if tested is not None and m.headroom_executions > tested:
        text += f" (extrapolated past the N = {tested} measured)"
    return text


def full_budget_problem(
    config: Configuration, records: Sequence[RunRecord], lane: MemoryLane | None
) -> str | None:
    """Why the lane's cell is not the configuration's worst (None: it is). With spillover
    on, a step holds the most when its store is full: a headroom from a cell that never
    filled the budget would promise room that a full budget does not leave."""
    if lane is None or effective_threshold(config) is None:
        return None
    cell = f"{lane.recipe}/{lane.input}"
    seen = [r.budget_inline for r in records if (r.recipe, r.input) == (lane.recipe, lane.input)]
    if 1 in seen:
        return None
    if not seen or None in seen:
        return (
            f"whether the lane's cell {cell} fills the budget was not measured (its runs' "
            "budget_inline): a headroom there may overstate a full budget's"
        )
    return (
        f"the lane's cell {cell} never filled the budget: a step that fills it holds "
        "more, so the headroom there would overstate it; point memory.lane at an input "
        "that fills the budget (matrices/memory-budget.yaml: code-review/budget-16MiB)"
    )


def store_claim(
    config: Configuration, records: Sequence[RunRecord]
) -> tuple[Fraction | None, ClaimReading, str]:
    """(the store's own bytes over its results' bytes, `within` | `above` | `not
    measured`, why not measured) over the configuration's runs that filled the budget:
    the PR's claim is about a full budget, so a store that never filled says nothing of
    it."""
    if effective_threshold(config) is None:
        return None, "not measured", "spillover is off: there is no store"
    filled = [r for r in records if r.budget_inline == 1]
    if not filled:
        unknown = any(r.budget_inline is None for r in records)
        why = (
            "whether its runs filled the budget was not measured (budget_inline null)"
            if unknown
            else "no run filled the budget (the claim is about a full budget)"
        )
        return None, "not measured", why
    ratios = [
        Fraction(m.store_bytes, m.store_results_bytes)
        for r in filled
        if (m := r.mcp_host_memory) is not None
        and m.store_bytes is not None
        and m.store_results_bytes
    ]
    if not ratios:
        return (
            None,
            "not measured",
            ("no figure of the store's own bytes (the mcp-host exposes none on a cluster)"),
        )
    ratio = max(ratios)
    return ratio, ("within" if ratio <= CLAIM_LIMIT else "above"), ""


def leak_reading(leaked: int | None, tolerance: int) -> LeakReading:
    """`none`, `leak` or `not measured` for the largest end-minus-start figure."""
    if leaked is None:
        return "not measured"
    return "leak" if leaked > tolerance else "none"


def claim_text(m: MemoryConfig) -> str:
    """`within (store x1.075)`, `above (store x1.150)` or `not measured`."""
    if m.store_ratio is None:
        return m.claim
    return f"{m.claim} (store x{float(m.store_ratio):.3f})"


def leak(records: Sequence[RunRecord]) -> tuple[int | None, str]:
    """The largest end-minus-start working set over the blocks of `records` (one
    configuration's), and why it is null."""
    seen: set[int] = set()
    deltas: list[int] = []
    for r in records:
        mem = r.mcp_host_memory
        if mem is None or mem.start_bytes is None or mem.end_bytes is None:
            continue
        if mem.block is not None:
            if mem.block in seen:
                continue
            seen.add(mem.block)
        deltas.append(mem.end_bytes - mem.start_bytes)
    if not deltas:
        return None, (
            "the working set at a block's start and end was not measured (the profile's "
            "memory.working_set query, or records written before it)"
        )
    return max(deltas), ""


def contradictions(records: Sequence[RunRecord]) -> list[str]:
    """The memory figures of one configuration's runs that cannot all be true, one line
    each (the first run of each kind named): a figure built on them would be reported
    as a fact."""
    found: dict[str, str] = {}
    for r in records:
        m = r.mcp_host_memory
        if m is None:
            continue
        peak, limit, start = m.peak_bytes, m.limit_bytes, m.start_bytes
        if limit == 0:
            found.setdefault("limit", f"{r.run_id}: a memory limit of 0")
        if peak is not None and limit and peak > limit and not m.oom_kills:
            found.setdefault(
                "peak",
                f"{r.run_id}: a peak of {peak} bytes above its limit of {limit} with no OOM kill",
            )
        # Both are samples (a peak is a lower bound), so a start a little above the peak
        # is the sampling's; more than twice it, no sampling explains.
        if start is not None and peak is not None and start > 2 * peak:
            found.setdefault(
                "start",
                f"{r.run_id}: a working set at the start ({start} bytes) more than twice the "
                f"peak ({peak} bytes)",
            )
        if peak == 0:
            found.setdefault("zero", f"{r.run_id}: a peak of 0 bytes measured")
    return list(found.values())


def _completed_cells(records: Sequence[RunRecord], config: str) -> set[tuple[str, str]]:
    return {(r.recipe, r.input) for r in records if r.config == config and r.outcome == "succeeded"}


def check_memory(
    records: Sequence[RunRecord],
    matrix: Matrix,
    stage: str | None,
    lane: MemoryLane | None,
    lane_problem: str | None = None,
) -> MemoryCheck | None:
    """Every configuration's memory figures against the baseline's; None when no record
    of the stage carries memory figures, no lane ran and no lane file is broken."""
    cells = {(r.name, i.name) for r, i in matrix.cells()}
    names = [c.name for c in matrix.configurations]
    mine = [
        r
        for r in records
        if r.stage == stage and r.config in names and (r.recipe, r.input) in cells
    ]
    if (
        not any(r.mcp_host_memory is not None for r in mine)
        and lane is None
        and lane_problem is None
    ):
        return None
    base = matrix.acceptance.baseline
    base_cells = _completed_cells(mine, base)
    base_dead = sum(r.config == base and r.outcome in DIED for r in mine)
    peaks: dict[str, tuple[int | None, int | None, int, int]] = {}
    for name in names:
        common = _completed_cells(mine, name) & base_cells
        own = [r for r in mine if r.config == name]
        done = [r for r in own if r.outcome == "succeeded" and (r.recipe, r.input) in common]
        measured = [r.mcp_host_memory for r in done if r.mcp_host_memory is not None]
        peak_values = [m.peak_bytes for m in measured if m.peak_bytes is not None]
        limits = [m.limit_bytes for m in measured if m.limit_bytes is not None]
        peaks[name] = (
            max(peak_values) if peak_values else None,
            min(limits) if limits else None,
            len(done),
            sum(r.outcome in DIED for r in own),
        )
    base_peak = peaks[base][0]
    source: Literal["measured", "modelled"] = "modelled" if stage == "sim" else "measured"
    tolerance = LEAK_TOLERANCE_BYTES[source]
    configs: dict[str, MemoryConfig] = {}
    for config in matrix.configurations:
        name = config.name
        own = [r for r in mine if r.config == name]
        peak, limit, compared, left_out = peaks[name]
        reasons: dict[str, str] = {}
        if peak is None:
            reasons["peak_bytes"] = (
                "no completed run in a cell the baseline completed too carries a peak"
            )
        if limit is None:
            reasons["limit_bytes"] = "no compared run carries the mcp-host's limit"
        ratio: Fraction | None = None
        if peak is not None and base_peak:
            ratio = Fraction(peak, base_peak)
        elif base_peak == 0:
            reasons["ratio_to_baseline"] = f"contradiction: {base}'s peak was measured as 0 bytes"
        else:
            reasons["ratio_to_baseline"] = (
                f"{base}'s peak is not measured"
                if base_peak is None
                else "the peak is not measured"
            )
        points = [p for p in lane.points if p.config == name] if lane is not None else []
        room, per_execution, how = headroom(points)
        not_worst = full_budget_problem(config, own, lane)
        if lane_problem is not None:
            how = f"memory-lane.json: {lane_problem}"
        elif lane is None:
            how = "no concurrency lane ran (the matrix's memory.concurrency)"
        elif not_worst is not None and points:
            room = per_execution = None
            how = not_worst
        reasons["headroom_executions"] = how
        leaked, why = leak([r for r in own if r.outcome != "harness_error"])
        if leaked is None:
            reasons["leak_bytes"] = why
        claim: ClaimReading
        store_ratio, claim, why = store_claim(config, own)
        if why:
            reasons["claim"] = why
        wrong = contradictions(own)
        if wrong:  # no figure is built on figures that cannot all be true
            say = "contradiction: " + "; ".join(wrong)
            peak = limit = ratio = room = leaked = per_execution = store_ratio = None
            claim = "not measured"
            for figure in ("peak_bytes", "limit_bytes", "ratio_to_baseline",
                           "headroom_executions", "leak_bytes", "claim"):  # fmt: skip
                reasons[figure] = say
        configs[name] = MemoryConfig(
            peak_bytes=peak,
            limit_bytes=limit,
            ratio_to_baseline=ratio,
            headroom_executions=room,
            leak_bytes=leaked,
            per_execution_bytes=per_execution,
            lane_max_executions=max((p.executions for p in points), default=None),
            runs_compared=compared,
            runs_left_out=left_out,
            store_ratio=store_ratio,
            claim=claim,
            leak=leak_reading(leaked, tolerance),
            reasons=reasons,
        )
    comparison = "completed runs only, in the cells both the configuration and "
    comparison += f"{base} completed"
    if base_dead:
        comparison += (
            f"; {base_dead} run(s) of {base} ended early (failed, aborted or timed out, "
            "e.g. the context overflowed) and are left out: they held less than a finished run"
        )
    return MemoryCheck(
        source=source,
        claim_limit=CLAIM_LIMIT,
        leak_tolerance_bytes=tolerance,
        baseline=base,
        claim_ratio=PR_CLAIM_RATIO,
        claim=CLAIM,
        comparison=comparison,
        headroom_method=HEADROOM_METHOD,
        leak_method=LEAK_METHOD,
        lane_problem=lane_problem,
        configs=configs,
    )
