"""Memory as a check (docs/reference.md §3.5): per configuration, against the baseline
on the same cells, the mcp-host's peak working set and its ratio to the baseline's,
the headroom (executions at once until the limit, from the concurrency lane) and a
leak figure (the working set after a block minus at its start). Pure: records and
the lane in, `MemoryCheck` out; it never changes a criterion or the decision.

Only completed runs are compared: a baseline run that died early (the context
overflowed, a timeout) held less than one that finished, so including it would
flatter the configuration. The runs left out are counted on each side.

The PR's claim (about +7% working set at a full budget) is shown as a reference line
beside the measured ratio; it is never an input of these figures. On the simulator
every figure is modelled: plan/memory_model.py's baseline, limit and store overhead are the
model's inputs, so the ratio there restates the model rather than measures it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.records import RunRecord
from spillover_harness.results.results_dir import LanePoint, MemoryLane
from spillover_harness.results.verdict import MemoryCheck, MemoryConfig

__all__ = ["PR_CLAIM_RATIO", "check_memory", "headroom", "headroom_text", "leak", "line_fit"]

# The PR: a full 16 MiB budget costs about 7% more working set than the same results
# kept inline. A reference line in the report, never an input.
PR_CLAIM_RATIO = Fraction(107, 100)
CLAIM = "the PR's claim: about +7% working set over off at a full 16 MiB budget (a reference)"
DIED = ("failed", "aborted", "timed_out")
HEADROOM_METHOD = (
    "a least-squares line through the concurrency lane's (N, peak) points of the "
    "configuration, peak = a + b x N; headroom = the largest N with a + b x N <= the "
    "limit, i.e. floor((limit - a) / b); null with fewer than two N or when the peak "
    "does not grow with N"
)
LEAK_METHOD = (
    "the working set at the end of a configuration block minus at its start, the "
    "largest over the configuration's blocks (the simulator: per execution)"
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
    """(executions at once until the limit, bytes per execution, why null or how)."""
    if not points:
        return None, None, "no concurrency lane point for this configuration"
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
    configs: dict[str, MemoryConfig] = {}
    for name in names:
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
        if lane_problem is not None:
            how = f"memory-lane.json: {lane_problem}"
        elif lane is None:
            how = "no concurrency lane ran (the matrix's memory.concurrency)"
        reasons["headroom_executions"] = how
        leaked, why = leak([r for r in mine if r.config == name and r.outcome != "harness_error"])
        if leaked is None:
            reasons["leak_bytes"] = why
        wrong = contradictions([r for r in mine if r.config == name])
        if wrong:  # no figure is built on figures that cannot all be true
            say = "contradiction: " + "; ".join(wrong)
            peak = limit = ratio = room = leaked = per_execution = None
            for figure in ("peak_bytes", "limit_bytes", "ratio_to_baseline",
                           "headroom_executions", "leak_bytes"):  # fmt: skip
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
        source="modelled" if stage == "sim" else "measured",
        baseline=base,
        claim_ratio=PR_CLAIM_RATIO,
        claim=CLAIM,
        comparison=comparison,
        headroom_method=HEADROOM_METHOD,
        leak_method=LEAK_METHOD,
        lane_problem=lane_problem,
        configs=configs,
    )
