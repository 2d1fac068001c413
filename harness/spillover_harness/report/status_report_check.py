"""The status report as a check (docs/reference.md §3.7): whether the status report a
step sends the coordinator grows with the results spillover stored. Pure: records in,
`StatusReportCheck` out; like the memory check it changes no criterion and not the
decision.

A stored result may be named in the report (a ref is a few hundred bytes at most), but
the report must not carry its content or its summary: the coordinator keeps the report,
so a report that grows with every spill moves the stored bytes to the coordinator. Per
cell where the configuration stored results, the growth per stored result is (its
median report size - the baseline's median) / its median results stored; `grows` past
`LIMIT_BYTES` per stored result (a summary alone holds 2 KiB of head and tail), `flat`
otherwise, `not measured` when no cell can tell.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from fractions import Fraction

from spillover_harness.plan.matrix import Matrix
from spillover_harness.results.records import RunRecord
from spillover_harness.results.verdict import StatusReportCheck, StatusReportConfig

__all__ = [
    "LIMIT_BYTES",
    "check_status_report",
    "status_report_lines",
    "status_report_section",
]

LIMIT_BYTES = 1024
METHOD = (
    "per cell where the configuration stored results: (its median status report - the "
    "baseline's) / its median results stored; the largest over the cells; `grows` past "
    f"{LIMIT_BYTES} bytes per stored result"
)


def _median(values: Sequence[int]) -> Fraction | None:
    return Fraction(statistics.median(values)) if values else None


def _per_stored(own: Sequence[RunRecord], base: Sequence[RunRecord]) -> tuple[Fraction | None, str]:
    """The cell's growth per stored result, or why the cell cannot tell."""
    stored = _median([r.spillover_persisted for r in own if r.spillover_persisted is not None])
    if not stored:
        return None, "stored nothing"
    mine = _median([r.status_report_bytes for r in own if r.status_report_bytes is not None])
    theirs = _median([r.status_report_bytes for r in base if r.status_report_bytes is not None])
    if mine is None or theirs is None:
        return None, "the status report's size was not measured"
    return (mine - theirs) / stored, ""


def _config_check(records: Sequence[RunRecord], matrix: Matrix, name: str) -> StatusReportConfig:
    base = matrix.acceptance.baseline
    worst: tuple[Fraction, str] | None = None
    why: set[str] = set()
    for recipe, spec in matrix.cells():
        runs = [r for r in records if (r.recipe, r.input) == (recipe.name, spec.name)]
        per, reason = _per_stored(
            [r for r in runs if r.config == name], [r for r in runs if r.config == base]
        )
        if per is None:
            why.add(reason)
        elif worst is None or per > worst[0]:
            worst = (per, f"{recipe.name}/{spec.name}")
    if worst is None:
        reason = "no cell can tell: " + ", ".join(sorted(why)) if why else "no cell"
        return StatusReportConfig(reading="not measured", reason=reason)
    per, cell = worst
    if per > LIMIT_BYTES:
        return StatusReportConfig(reading="grows", bytes_per_stored_result=per, cell=cell)
    return StatusReportConfig(reading="flat", bytes_per_stored_result=per, cell=cell)


def check_status_report(
    records: Sequence[RunRecord], matrix: Matrix, stage: str | None
) -> StatusReportCheck | None:
    """Every non-baseline configuration's reading; None when no record of the stage
    carries a status report size."""
    mine = [r for r in records if r.stage == stage and r.outcome != "harness_error"]
    if not any(r.status_report_bytes is not None for r in mine):
        return None
    base = matrix.acceptance.baseline
    return StatusReportCheck(
        baseline=base,
        limit_bytes_per_stored_result=LIMIT_BYTES,
        method=METHOD,
        configs={
            c.name: _config_check(mine, matrix, c.name)
            for c in matrix.configurations
            if c.name != base
        },
    )


def status_report_lines(check: StatusReportCheck | None) -> list[str]:
    """`status report (against off, ...)`: one line per configuration (none without)."""
    if check is None:
        return []
    lines = [
        f"status report (against {check.baseline}; grows past "
        f"{check.limit_bytes_per_stored_result} bytes per stored result):"
    ]
    for name, c in check.configs.items():
        if c.bytes_per_stored_result is None:
            lines.append(f"  {name}: {c.reading} ({c.reason})")
        else:
            per = float(c.bytes_per_stored_result)
            lines.append(f"  {name}: {c.reading} ({per:+,.0f} bytes per stored result at {c.cell})")
    return lines


def status_report_section(check: StatusReportCheck | None, *, simulated: bool) -> list[str]:
    """The report's section: the method and one bullet per configuration."""
    if check is None:
        return []
    label = " (modelled)" if simulated else ""
    lines = [
        f"## Status report size{label}",
        "",
        "Whether the status report grows with the results spillover stored (a check beside "
        f"the criteria; it does not change the decision): {check.method}.",
        "",
    ]
    lines += [f"- {line.strip()}" for line in status_report_lines(check)[1:]]
    return [*lines, ""]
