"""Benchmark: the cluster stage's own overhead per run, on the local control plane.

A reduced matrix (3 configurations x 2 inputs x BENCH_CLUSTER_REPS repetitions)
through `spillover-harness run --stage minikube` on the platform of
tests/integration/platform_env.py (the local control plane with kwok, the real
operator, the HTTP simulator behind the WRC Service, the WRC stand-in re-rendering
the mcp-host pods, a real Prometheus scraping every 30 s as the shipped profiles say).

Prints `name=value` lines:

- `stage_wall_s`: the whole stage (preflight, configuration switches, runs, counters,
  report);
- `platform_run_s`: the platform's own run time, summed (the simulator's wall time
  of each run);
- `harness_overhead_per_run_s`: (stage_wall_s - platform_run_s) / runs. Goal: <= 2.

Asserts nothing (speed is measured here, never in a test). Needs `make controlplane`
and `make prometheus`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from k8s_helpers import is_ready, wait_for  # noqa: E402
from matrix_builders import cluster_matrix  # noqa: E402
from platform_env import platform_env  # noqa: E402
from spillover_harness.cli import main  # noqa: E402
from spillover_harness.results.records import read_records  # noqa: E402

SCRAPE_INTERVAL_S = float(os.environ.get("BENCH_CLUSTER_SCRAPE_S", "30"))
REPS = int(os.environ.get("BENCH_CLUSTER_REPS", "2"))

MATRIX = cluster_matrix("bench-cluster", minikube_repetitions=REPS, run_timeout_s=300)


def main_bench() -> int:
    with (
        tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp,
        platform_env(
            Path(tmp), MATRIX, "bench-cluster", scrape_interval_s=SCRAPE_INTERVAL_S
        ) as env,
        env.operator("op-bench"),
    ):
        wait_for("the operator to apply the policy", lambda: is_ready(env.policy()))
        out = Path(tmp) / "results"
        t0 = time.monotonic()
        code = main(env.stage_args(env.profile_path, out))
        stage_wall = time.monotonic() - t0
        if code != 0:
            print(f"bench-cluster: the stage exited {code}", file=sys.stderr)
            return code
        records = read_records(out / "runs.jsonl")
        platform = 0.0
        for state_id in env.sim.run_ids():
            state = env.sim.get_run(state_id)
            if state is not None and state.wall_s is not None:
                platform += state.wall_s
        runs = len(records)
    print(f"runs={runs}")
    print(f"scrape_interval_s={SCRAPE_INTERVAL_S:g}")
    print(f"stage_wall_s={stage_wall:.1f}")
    print(f"platform_run_s={platform:.1f}")
    print(f"harness_overhead_per_run_s={(stage_wall - platform) / max(runs, 1):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main_bench())
