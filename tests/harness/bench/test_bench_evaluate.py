"""The evaluate benchmark helper runs and its synthetic records cover the matrix (no timing)."""

from __future__ import annotations

from collections import Counter

from spillover_harness.bench.evaluate import bench_evaluate, synthetic_records
from spillover_harness.evaluate import evaluate
from spillover_harness.plan.matrix import load_matrix


def test_synthetic_records_cover_every_configuration_and_cell_evenly() -> None:
    matrix = load_matrix(None)
    records = synthetic_records(240, matrix)
    per_key = Counter((r.config, r.recipe, r.input) for r in records)
    assert len(per_key) == len(matrix.configurations) * len(matrix.cells())
    assert set(per_key.values()) == {20}
    assert len({r.run_id for r in records}) == 240
    assert len({r.key for r in records}) == 240
    verdict = evaluate(records, matrix, resamples=20)
    assert verdict.records_evaluated == 240
    assert verdict.ignored == {}


def test_bench_evaluate_returns_seconds() -> None:
    seconds = bench_evaluate(120)
    assert isinstance(seconds, float)
    assert seconds >= 0.0


def test_direct_summary_agrees_with_the_evaluator_on_counts() -> None:
    """The bench's direct path computes what it claims (so the ratio compares like
    with like): per cell, the successes the evaluator's cells also count."""
    from spillover_harness.bench.evaluate import direct_summary
    from spillover_harness.evaluate.context import group

    matrix = load_matrix(None)
    records = synthetic_records(480, matrix)
    summary = direct_summary(records)
    grouped = group(records, matrix, "sim")
    assert summary
    for key, (succeeded, median_tokens) in summary.items():
        assert grouped.data[key].succeeded == succeeded
        assert median_tokens > 0
