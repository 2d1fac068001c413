"""Per-cell summaries for the report's tables: what each configuration did in each cell."""

from __future__ import annotations

from spillover_harness.evaluate.context import CellData
from spillover_harness.results.verdict import CellSummary
from spillover_harness.stats import median_float


def summarize(config: str, recipe: str, inp: str, size: str, d: CellData) -> CellSummary:
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
        median_input_tokens=median_float(d.tokens),
        median_output_tokens=median_float(d.output_tokens),
        median_iterations=median_float(d.iterations),
        median_duration_s=median_float(d.durations),
        median_persisted=median_float(d.persisted),
        median_reads=median_float(d.reads),
        median_status_report_bytes=median_float(d.report_bytes),
        quality_true=d.quality_true,
        quality_known=d.quality_known,
        leaks=len(d.leak_ids),
        leak_unknown=len(d.leak_unknown_ids),
    )
