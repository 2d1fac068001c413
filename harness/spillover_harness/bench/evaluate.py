"""Benchmark: how long `evaluate` takes on many records (wired into `make bench`).

The records are synthetic, deterministic, spread evenly over the default
matrix's configurations and cells, with a sprinkling of harness errors and
unmeasured fields so every branch of the evaluator is exercised. Only the
`evaluate` call is timed, not building the records.
"""

from __future__ import annotations

import random
import statistics
import time

from spillover_harness.evaluate import evaluate
from spillover_harness.plan.matrix import Matrix, load_matrix
from spillover_harness.results.records import RunRecord, Stage

_STARTED = "2026-11-30T12:00:00+00:00"
_FINISHED = "2026-11-30T12:01:00+00:00"


def synthetic_records(
    n_records: int, matrix: Matrix, *, stage: Stage = "sim", seed: int = 0
) -> list[RunRecord]:
    """`n_records` plausible records, round-robin over configurations x cells."""
    rng = random.Random(seed)
    configs = [c.name for c in matrix.configurations]
    cells = [(r.name, i.name, i.size_class) for r, i in matrix.cells()]
    base_tokens = {"small": 40_000, "medium": 120_000, "large": 600_000}
    records: list[RunRecord] = []
    per_round = len(configs) * len(cells)
    for k in range(n_records):
        config = configs[k % len(configs)]
        recipe, inp, size = cells[(k // len(configs)) % len(cells)]
        repetition = k // per_round + 1
        harness_error = rng.random() < 0.01
        scale = 1.0 if config == matrix.acceptance.baseline else 0.8
        tokens = int(base_tokens[size] * scale * rng.uniform(0.9, 1.1))
        records.append(
            RunRecord(
                run_id=f"bench-{k}",
                stage=stage,
                config=config,
                recipe=recipe,
                input=inp,
                size_class=size,
                repetition=repetition,
                outcome="harness_error" if harness_error else "succeeded",
                hit_iteration_limit=None if harness_error else False,
                iterations=None if harness_error else rng.randint(3, 12),
                input_tokens=None if harness_error else tokens,
                output_tokens=None if harness_error else rng.randint(500, 4000),
                duration_s=None if harness_error else rng.uniform(5.0, 60.0),
                spillover_persisted=None if harness_error else rng.randint(0, 4),
                spillover_reads=None if harness_error else rng.randint(0, 6),
                status_report_bytes=None if harness_error else rng.randint(1000, 9000),
                quality_ok=None if harness_error else rng.random() < 0.97,
                disk_clean=None if harness_error else True,
                logs_clean=None if harness_error else True,
                started_at=_STARTED,
                finished_at=_FINISHED,
            )
        )
    return records


def bench_evaluate(n_records: int = 100_000) -> float:
    """Seconds `evaluate` takes on `n_records` synthetic records over the default matrix."""
    matrix = load_matrix(None)
    records = synthetic_records(n_records, matrix)
    start = time.perf_counter()
    evaluate(records, matrix)
    return time.perf_counter() - start


def direct_summary(records: list[RunRecord]) -> dict[tuple[str, str, str], tuple[int, float]]:
    """The direct path a one-off script would take: per (configuration, recipe, input),
    the successes and the median input tokens, in one plain pass."""
    tokens: dict[tuple[str, str, str], list[int]] = {}
    succeeded: dict[tuple[str, str, str], int] = {}
    for r in records:
        key = (r.config, r.recipe, r.input)
        succeeded[key] = succeeded.get(key, 0) + (r.outcome == "succeeded")
        if r.input_tokens is not None:
            tokens.setdefault(key, []).append(r.input_tokens)
    return {key: (succeeded[key], statistics.median(tokens.get(key) or [0])) for key in succeeded}


def bench_evaluate_side_by_side(n_records: int = 100_000) -> tuple[float, float]:
    """(seconds of `evaluate`, seconds of `direct_summary`) on the same records,
    measured alternately in the same run (best of three each)."""
    matrix = load_matrix(None)
    records = synthetic_records(n_records, matrix)
    ours: list[float] = []
    plain: list[float] = []
    for _ in range(3):
        start = time.perf_counter()
        evaluate(records, matrix)
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        direct_summary(records)
        plain.append(time.perf_counter() - start)
    return min(ours), min(plain)


def main() -> None:
    n = 100_000
    print(f"evaluate: {n:,} records in {bench_evaluate(n):.3f} s")


if __name__ == "__main__":
    main()
