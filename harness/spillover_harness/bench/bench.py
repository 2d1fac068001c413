"""`python -m spillover_harness.bench.bench` (`make bench`): wall-time figures, never assertions.

1. the full `sim` stage of the default matrix (3 configurations x 4 inputs x
   5 repetitions = 60 runs) on the embedded simulator, at the matrix's
   concurrency, into a temporary results directory: the real runner, the real
   SimDriver, durable appends included; beside it the direct path, the same
   jobs straight through the driver;
2. evaluating 100,000 synthetic records (`bench_evaluate`), beside the direct
   path: one plain pass computing each cell's success count and median tokens;
3. the runs `run --until-stable 0.9` spends on marginal scenarios, beside the runs a
   uniform increase of repetitions needs to reach the same target, the runs it spends
   on the shipped simulator, and its error rates (`bench.adaptive`).

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

from spillover_harness.plan.matrix import load_matrix


def bench_sim_matrix(concurrency: int | None = None) -> tuple[float, int, int]:
    """(wall seconds, runs recorded, concurrency) of the default matrix's `sim` stage."""
    import threading

    from spillover_harness.stages.sim_stage import SimStageSpec, sim_stage

    matrix = load_matrix(None)
    workers = concurrency if concurrency is not None else matrix.concurrency
    stage = sim_stage(matrix, SimStageSpec(concurrency=workers, progress=False, quiet=True))
    with tempfile.TemporaryDirectory(prefix="spillover-bench-") as tmp:
        start = time.perf_counter()
        result = stage.run(matrix, Path(tmp) / "sim", cancel=threading.Event())
        wall = time.perf_counter() - start
    return wall, len(result.records), workers


def bench_sim_direct(concurrency: int) -> float:
    """Wall seconds of the direct path: the same jobs through `SimDriver.run` in a
    thread pool of the same size, with no runner (no records file, no fsync, no
    progress, no resume bookkeeping). The ratio to `bench_sim_matrix` is what the
    runner costs."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from spillover_harness.drivers.sim import SimDriver
    from spillover_harness.fixtures import build_fixtures
    from spillover_harness.run.runner import plan_jobs

    matrix = load_matrix(None)
    driver = SimDriver(fixtures=build_fixtures(matrix.seed))
    cancel = threading.Event()
    with tempfile.TemporaryDirectory(prefix="spillover-bench-direct-") as tmp:
        jobs = plan_jobs(matrix, "sim", Path(tmp))
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(lambda job: driver.run(job, cancel), jobs))
        return time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spillover_harness.bench.bench",
        description=(
            "Print, one name=value per line, the wall time of the sim matrix and of "
            "evaluating many records, each beside its direct path measured in the same "
            "run (`ratio NAME` = ours / direct)."
        ),
    )
    parser.add_argument(
        "--records", type=int, default=100_000, help="records to evaluate (default 100000)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=None, help="sim runs at once (default: the matrix's)"
    )
    parser.add_argument(
        "--seeds", type=int, default=5, help="seeds per marginal scenario (default 5)"
    )
    parser.add_argument(
        "--error-seeds", type=int, default=40,
        help="seeds per scenario for --until-stable's error rates (default 40)",
    )  # fmt: skip
    parser.add_argument(
        "--cap", type=int, default=30, help="--max-repetitions of the adaptive runs (default 30)"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.seeds <= 1000 or not 1 <= args.error_seeds <= 1000:
        parser.error("--seeds and --error-seeds must be between 1 and 1000")
    if not 5 <= args.cap <= 200:
        parser.error("--cap must be between 5 and 200")

    from spillover_harness.bench.evaluate import bench_evaluate_side_by_side

    print(f"machine={platform.python_implementation()}-{platform.python_version()}")
    print(f"cpus={os.cpu_count()}")
    wall, runs, workers = bench_sim_matrix(args.concurrency)
    direct = bench_sim_direct(workers)
    print(f"sim_matrix_runs={runs}")
    print(f"sim_matrix_concurrency={workers}")
    print(f"sim_matrix_s={wall:.3f}")
    print(f"sim_direct_s={direct:.3f}")
    print(f"ratio sim_matrix={wall / direct:.2f}")
    ours, plain = bench_evaluate_side_by_side(args.records)
    print(f"evaluate_records={args.records}")
    print(f"evaluate_s={ours:.3f}")
    print(f"evaluate_direct_s={plain:.3f}")
    print(f"ratio evaluate={ours / plain:.2f}")
    from spillover_harness.bench.adaptive import print_adaptive

    print_adaptive(0.9, args.cap, args.seeds, args.error_seeds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
