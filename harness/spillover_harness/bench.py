"""`python -m spillover_harness.bench` (`make bench`): wall-time figures, never assertions.

1. the full `sim` stage of the default matrix (3 configurations x 4 inputs x
   5 repetitions = 60 runs) on the embedded simulator, at the matrix's
   concurrency, into a temporary results directory: the real runner, the real
   SimDriver, durable appends included;
2. evaluating 100,000 synthetic records (`bench_evaluate`).

The figures depend on the machine; tests never assert timings.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from spillover_harness.matrix import load_matrix


def bench_sim_matrix(concurrency: int | None = None) -> tuple[float, int, int]:
    """(wall seconds, runs recorded, concurrency) of the default matrix's `sim` stage."""
    from spillover_harness.drivers.sim import SimDriver
    from spillover_harness.fixtures import build_fixtures
    from spillover_harness.runner import run_stage

    matrix = load_matrix(None)
    workers = concurrency if concurrency is not None else matrix.concurrency
    with tempfile.TemporaryDirectory(prefix="spillover-bench-") as tmp:
        start = time.perf_counter()
        result = run_stage(
            matrix,
            "sim",
            SimDriver(fixtures=build_fixtures(matrix.seed)),
            Path(tmp) / "sim",
            resume=False,
            concurrency=workers,
            progress=False,
            quiet=True,
        )
        wall = time.perf_counter() - start
    return wall, len(result.records), workers


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spillover_harness.bench",
        description="Print the wall time of the sim matrix and of evaluating many records.",
    )
    parser.add_argument(
        "--records", type=int, default=100_000, help="records to evaluate (default 100000)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=None, help="sim runs at once (default: the matrix's)"
    )
    args = parser.parse_args(argv)

    from spillover_harness.bench_evaluate import bench_evaluate

    print(
        f"machine: {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs"
    )
    wall, runs, workers = bench_sim_matrix(args.concurrency)
    print(
        f"sim matrix:  {runs} runs (3 configurations x 4 inputs x 5 repetitions, "
        f"concurrency {workers}) in {wall:.2f} s = {runs / wall:.1f} runs/s "
        f"({1000 * wall / runs:.1f} ms per run)"
    )
    n = args.records
    seconds = bench_evaluate(n)
    print(
        f"evaluate:    {n:,} records in {seconds:.3f} s = {n / seconds:,.0f} records/s "
        f"({1e6 * seconds / n:.1f} us per record)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
