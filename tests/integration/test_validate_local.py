"""`make validate-local`, as a user without Minikube runs it: on the local cluster's real
node, the operator pod from the shipped overlay, the WRC stand-in's run API sending each
run pod to pod to a real mcp-host process of its recipe, a Prometheus of its own
following those pods, and the reduced matrix (stage minikube, profile `local`) through
the harness's own cluster stage. The decision is printed, the report says the platform
was simulated, and every record is about the pod that served it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from controlplane.localcluster import LocalCluster
from repo_paths import REPO_ROOT
from spillover_harness.plan.matrix import load_matrix
from spillover_harness.results.records import read_records
from spillover_harness.results.results_dir import StageDir
from spillover_operator.domain.model import ENABLED_VAR, THRESHOLD_VAR
from spillover_operator.exit_codes import BAD_INPUT

pytestmark = pytest.mark.integration

PROMETHEUS_PORT = 9391  # the `local` profile's prometheus.url
# The mcp-host pods' memory limit is lowered to 64Mi (MCP_HOST_MEMORY; 512Mi by
# default), and the matrix warns from 40% of it: the processes' measured peak (about
# 30 MiB here) crosses that, so the report's memory warning is shown from real figures.
MCP_HOST_MEMORY = "64Mi"
MCP_HOST_LIMIT_BYTES = 64 * 1024 * 1024
WARN_FRACTION = 0.4
# The concurrency lane on the real node: the default matrix runs it on the cluster
# stages (1, 2 and 4 executions of the lane's cell at once); here 1 and 2, so that the
# 64Mi pods are not OOM-killed, measured by the kubelet like the blocks.
LANE = (1, 2)
# The `local` profile's prometheus.scrape_interval_s: the step of a Prometheus peak.
PROMETHEUS_STEP = "prometheus@2s"
DEFAULT_MEMORY = "memory:\n  concurrency: [1, 2, 4]\n"


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_validate_local_prints_a_decision_from_records_of_the_pods_that_served_them(
    real_node_cluster: LocalCluster, tmp_path: Path
) -> None:
    assert not _listening(PROMETHEUS_PORT), f"127.0.0.1:{PROMETHEUS_PORT} is taken: stop it"
    results = tmp_path / "results"
    default = resources.files("spillover_harness.plan.matrices") / "spillover-default.yaml"
    matrix_file = tmp_path / "matrix.yaml"
    text = default.read_text(encoding="utf-8")
    assert DEFAULT_MEMORY in text  # the default matrix's lane, on its cluster stages
    lane = f"memory:\n  concurrency: {list(LANE)}\n  warn_fraction: {WARN_FRACTION}\n"
    matrix_file.write_text(text.replace(DEFAULT_MEMORY, lane))
    env = {**os.environ, "SPILLOVER_CLUSTER_DIR": str(real_node_cluster.workdir),
           "KUBECONFIG": str(real_node_cluster.kubeconfig)}  # fmt: skip
    run = subprocess.run(
        ["make", "--no-print-directory", "validate-local", f"RESULTS={results}", "TIMEOUT=240",
         f"HARNESS_MATRIX={matrix_file}", f"MCP_HOST_MEMORY={MCP_HOST_MEMORY}",
         "UNTIL_STABLE=0.999", "MAX_REPETITIONS=3"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1500, check=False,
    )  # fmt: skip
    assert run.returncode == 0, f"make validate-local failed:\n{run.stderr[-6000:]}"
    out = results / "local"
    decision = [line for line in run.stdout.splitlines() if line.startswith("decision: ")]
    assert decision, run.stdout[-3000:]
    assert f"report: {out / 'report.md'}" in run.stdout
    assert not _listening(PROMETHEUS_PORT), "validate-local left its Prometheus running"

    # Every planned run is recorded, none a harness error, each about the one mcp-host pod
    # of its recipe that served it, whose process ran the configuration it claims.
    matrix = load_matrix(matrix_file)
    assert matrix.memory.warn_fraction == WARN_FRACTION
    assert matrix.runs_lane("minikube") and tuple(matrix.memory.concurrency) == LANE
    envs = {c.name: c.env for c in matrix.configurations}
    records = read_records(out / "runs.jsonl")
    # run --until-stable (UNTIL_STABLE): a round adds a third repetition to the cells whose
    # fresh runs most often move the decision, every configuration of them, recorded in
    # stage.json before its runs; or nothing was added, and stderr says why.
    stage = json.loads((out / "stage.json").read_text())
    extension = stage["matrix"].get("extension") or {}
    rounds = (stage.get("adaptive") or {}).get("rounds") or []
    if rounds:
        assert extension and set(extension.values()) == {3}, stage
        assert (
            "until-stable: " in run.stderr
            and "the cells whose fresh runs most often move it" in run.stderr
        )
    assert "until-stable: done: " in run.stderr, run.stderr[-3000:]
    reps = {
        (r.name, i.name): extension.get(f"{r.name}/{i.name}", matrix.repetitions.minikube)
        for r in matrix.recipes
        for i in r.inputs
    }
    assert sorted((r.config, r.recipe, r.input, r.repetition) for r in records) == sorted(
        (name, recipe, inp, rep)
        for name in envs
        for (recipe, inp), n in reps.items()
        for rep in range(1, n + 1)
    )
    for record in records:
        assert record.outcome != "harness_error", record.notes
        served = record.mcp_host_pods or []
        assert len(served) == 1, (record.run_id, record.notes)
        pod = served[0]
        assert pod.name.startswith(f"mcp-host-{record.recipe}-"), (record.run_id, pod.name)
        want = envs[record.config]
        assert pod.values[ENABLED_VAR] == want.get(ENABLED_VAR, "true"), (record.run_id, pod)
        assert pod.values[THRESHOLD_VAR] == want.get(THRESHOLD_VAR), (record.run_id, pod)
        assert record.disk_clean is True and record.logs_clean is True, record.notes
        # The memory of the block the run belongs to, measured by the real kubelet
        # (Prometheus scraping it through the API server): a peak, under the pod's limit.
        memory = record.mcp_host_memory
        assert memory is not None and memory.block is not None, (record.run_id, record.notes)
        assert memory.limit_bytes == MCP_HOST_LIMIT_BYTES, (record.run_id, memory)
        # restarts and OOM kills from the pods' own status (restarts_from: pod-status)
        assert (memory.restarts, memory.oom_kills) == (0, 0), (record.run_id, memory)
        assert memory.peak_bytes is not None and 0 < memory.peak_bytes < memory.limit_bytes, (
            record.run_id,
            memory,
        )
        # the blocks' peaks: the higher of Prometheus' (at the `local` profile's scrape
        # interval) and the kubelet Summary's (read every second while the block ran)
        assert memory.peak_source in ("kubelet-summary@1s", PROMETHEUS_STEP), memory
        # the working set at the block's start and end (the leak figure), by the kubelet
        assert memory.start_bytes is not None and memory.end_bytes is not None, (
            record.run_id,
            memory,
            record.notes,
        )
        # budget_inline measured from the mcp-host's warning (the shipped profiles read
        # it): 0 or 1, once per step execution; the default 16 MiB budget is never full
        # on these inputs
        assert record.budget_inline == 0, (record.run_id, record.budget_inline, record.notes)

    # the real kubelet's Summary gave at least one block's peak
    sources = {r.mcp_host_memory.peak_source for r in records if r.mcp_host_memory}
    assert "kubelet-summary@1s" in sources, sources
    stage = json.loads((out / "stage.json").read_text())
    assert stage["driver"]["profile"] == "local"
    assert stage["driver"]["simulated_platform"] is True
    report = (out / "report.md").read_text()
    assert "ran on a simulated platform" in report
    # The mcp-host pods are replaced at every switch: each block's counters are its own
    # pods' and agree with its runs.
    blocks = [line for line in report.splitlines() if line.startswith("- counters, block ")]
    assert len(blocks) >= len(envs), report[:4000]
    # On failure, how each block's end was read too (the targets, or Prometheus).
    how = [line for line in report.splitlines() if line.startswith("- counters, counters:")]
    assert all(line.endswith(": agree") for line in blocks), "\n".join(blocks + how)
    assert "judged per series" in report
    memory_rows = [line for line in report.splitlines() if line.startswith("| 128KiB | ")]
    assert any("MiB | 64.0 MiB |" in line for line in memory_rows), report[-6000:]

    # The concurrency lane ran for real: a point per configuration and N, each a peak the
    # kubelet measured under the pods' limit, and the report shows it.
    lane = StageDir(out).read_lane()
    assert lane is not None, "no memory-lane.json:\n" + run.stderr[-3000:]
    assert (lane.recipe, lane.input) == matrix.memory_lane_cell()
    assert sorted((p.config, p.executions) for p in lane.points) == sorted(
        (name, n) for name in envs for n in LANE
    ), (lane, report[-4000:])
    for point in lane.points:
        assert point.limit_bytes == MCP_HOST_LIMIT_BYTES, point
        assert 0 < point.peak_bytes < point.limit_bytes, point
        assert point.peak_source in ("kubelet-summary@1s", PROMETHEUS_STEP), point
    assert "**Concurrency lane**" in report, report[-6000:]
    # the real kubelet's Summary, read every second through the node proxy while the N
    # executions ran, gave a lane peak, and the report's lower bound names both steps
    assert any(p.peak_source == "kubelet-summary@1s" for p in lane.points), lane
    assert "the kubelet Summary API read every 1 s (`kubelet-summary@1s`)" in report
    assert f"Prometheus' scrapes every 2 s (`{PROMETHEUS_STEP}`)" in report
    # The platform's own outcomes are named (the simulator fails `off` on the large input
    # at times); a run the harness could not follow, or a point left out, is not expected.
    lane_notes = [line for line in report.splitlines() if "concurrency lane, " in line]
    assert not [n for n in lane_notes if "harness_error" in n or "left out" in n], lane_notes
    # Memory as a check, measured: each configuration against off, its headroom from the
    # lane's line and its leak, in verdict.json and on the terminal.
    memory_check = json.loads((out / "verdict.json").read_text())["memory"]
    assert memory_check["source"] == "measured" and memory_check["lane_problem"] is None
    for name in envs:
        figures = memory_check["configs"][name]
        assert figures["peak_bytes"] is not None, (name, figures)
        assert figures["ratio_to_baseline"] is not None, (name, figures)
        assert figures["leak_bytes"] is not None, (name, figures)
        # off: a headroom where the peak grew with N, else null with the reason (its
        # lane runs of the large input fail at times: such points feed no line). The
        # spillover configurations: none, since the lane's cell never filled their 16 MiB
        # budget (budget_inline 0 above) and a headroom there would overstate a full one.
        why = figures["reasons"]["headroom_executions"]
        if name == "off":
            assert figures["headroom_executions"] is not None or (
                "does not grow" in why or "ended early" in why
            ), (name, figures)
        else:
            assert figures["headroom_executions"] is None and "never filled the budget" in why, (
                name,
                figures,
            )
        assert f"  {name}: peak " in run.stdout, run.stdout[-3000:]
    assert "**Memory against `off`** (measured" in report, report[-6000:]
    warned = [line for line in report.splitlines() if line.startswith("- **Warning:** `")]
    assert {line.split("`")[1] for line in warned} >= set(envs), report[-6000:]

    # A decision of the simulator is not applied as the platform's.
    refused = subprocess.run(
        [str(Path(sys.executable).parent / "spillover-harness"), "apply-decision",
         "--results", str(out), "--dry-run"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert refused.returncode == BAD_INPUT, refused.stderr
    assert "simulated platform" in refused.stderr
