"""The simulator's HTTP contract (docs/simulator.md), over real sockets."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from spillover_harness.fixtures import build_fixtures
from spillover_harness.sim.server import SimServer, serve
from spillover_harness.sim.steprun import SimFaults
from spillover_operator.domain.model import BUDGET_VAR, ENABLED_VAR, THRESHOLD_VAR

SEED = 99


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    srv, thread = serve(out_dir=tmp_path_factory.mktemp("sim-http"), fixtures=build_fixtures(SEED))
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


def call(srv: SimServer, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(srv.url + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def start(srv: SimServer, run_id: str, **body: Any) -> None:
    payload = {"recipe": "code-review", "input": "large", "env": {}, "seed": 7, "run_id": run_id}
    payload.update(body)
    status, raw = call(srv, "POST", "/runs", payload)
    assert status == 202, raw
    assert json.loads(raw) == {"run_id": run_id}


def wait_done(srv: SimServer, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, raw = call(srv, "GET", f"/runs/{run_id}")
        assert status == 200
        state: dict[str, Any] = json.loads(raw)
        if state["phase"] not in ("Pending", "Running"):
            return state
        time.sleep(0.02)
    raise AssertionError(f"run {run_id} did not finish")


def counters(srv: SimServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, raw = call(srv, "GET", "/metrics")
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(raw.decode()):
        for sample in family.samples:
            if sample.name.endswith("_total"):
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_port_zero_binds_a_free_port(server: SimServer) -> None:
    assert server.server_address[1] != 0
    assert call(server, "GET", "/healthz") == (200, b"ok\n")


def test_run_poll_logs_and_metrics(server: SimServer) -> None:
    server.restart()
    start(server, "large-1")
    state = wait_done(server, "large-1")
    assert state["phase"] == "Succeeded" and state["outcome"] == "succeeded"
    assert state["iterations"] > 0 and state["toolsCalled"] > 0
    assert state["tokensUsed"]["input"] > state["tokensUsed"]["output"] > 0
    assert state["durationSeconds"] > 0 and state["statusReportBytes"] > 0
    assert state["spilloverPersisted"] == 3
    assert Path(state["outputDir"], "review.md").is_file()

    status, raw = call(server, "GET", "/runs/large-1/logs")
    assert status == 200
    lines = [json.loads(x) for x in raw.decode().splitlines()]
    started = [x for x in lines if x["msg"] == "LLM call started"]
    assert [x["iteration"] for x in started] == list(range(1, state["iterations"] + 1))
    body = [x for x in lines if x["msg"] == "status report received"]
    assert body[0]["bodyBytes"] == state["statusReportBytes"]

    c = counters(server)
    persisted = "clerum_workflow_step_spillover_persisted_total"
    reads = "clerum_workflow_step_spillover_reads_total"
    assert c[(persisted, (("tool", "read_file"),))] == 3
    assert c[(reads, (("with_range", "true"),))] == state["spilloverReads"]

    start(server, "large-2", seed=8)
    wait_done(server, "large-2")
    assert counters(server)[(persisted, (("tool", "read_file"),))] == 6


def test_restart_resets_the_counters(server: SimServer) -> None:
    start(server, "before-restart")
    wait_done(server, "before-restart")
    assert any(v > 0 for v in counters(server).values())
    status, raw = call(server, "POST", "/admin/restart")
    assert status == 200 and json.loads(raw)["restarted"] is True
    # No workflow series any more; the first-party counters (no labels) start at 0.
    assert {k: v for k, v in counters(server).items() if v} == {}
    assert not [k for k in counters(server) if k[0].startswith("clerum_workflow_step")]
    start(server, "after-restart")
    state = wait_done(server, "after-restart")
    persisted = "clerum_workflow_step_spillover_persisted_total"
    assert counters(server)[(persisted, (("tool", "read_file"),))] == state["spilloverPersisted"]


def test_spillover_off_counts_nothing(server: SimServer) -> None:
    server.restart()
    start(server, "off-1", env={"CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED": "false"})
    state = wait_done(server, "off-1")
    assert state["spilloverPersisted"] == 0 and state["spilloverReads"] == 0
    assert {k: v for k, v in counters(server).items() if v} == {}  # first-party ones at 0


def test_bad_requests(server: SimServer) -> None:
    ok = {"recipe": "summarize", "input": "document", "env": {}, "seed": 1, "run_id": "dup"}
    assert call(server, "POST", "/runs", ok)[0] == 202
    assert call(server, "POST", "/runs", ok)[0] == 409
    for bad in (
        {**ok, "run_id": "x1", "recipe": "nope"},
        {**ok, "run_id": "x2", "seed": "1"},
        {**ok, "run_id": "x3", "env": {"A": 1}},
        {**ok, "run_id": "../etc"},
        {**ok, "run_id": "x4", "extra": True},
        [1, 2],
    ):
        status, raw = call(server, "POST", "/runs", bad)
        assert status == 400, bad
        assert "error" in json.loads(raw)
    assert call(server, "GET", "/runs/unknown")[0] == 404
    assert call(server, "GET", "/runs/unknown/logs")[0] == 404
    assert call(server, "GET", "/nothing")[0] == 404
    wait_done(server, "dup")


def test_cancel_aborts_a_paced_run(server: SimServer) -> None:
    start(server, "slow", pace=1.0)
    status, _ = call(server, "POST", "/runs/slow/cancel")
    assert status == 202
    state = wait_done(server, "slow")
    assert state["phase"] == "Aborted" and state["outcome"] == "aborted"


def test_module_entry_point_serves(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spillover_harness.sim.server",
            "--port",
            "0",
            "--out",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in line
        url = line.rsplit(" ", 1)[-1].strip()
        with urllib.request.urlopen(url + "/healthz", timeout=30) as response:
            assert response.read() == b"ok\n"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_spillover_reports_the_process_environment_when_serving_as_an_mcp_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--env-from-process: what /spillover reports is this process's own environment;
    with the ignore_env fault, the defaults it then runs with."""
    monkeypatch.setenv(ENABLED_VAR, "false")
    monkeypatch.delenv(THRESHOLD_VAR, raising=False)
    monkeypatch.delenv(BUDGET_VAR, raising=False)
    for faults, expected in (
        (SimFaults(), {ENABLED_VAR: "false", THRESHOLD_VAR: None, BUDGET_VAR: None}),
        (SimFaults(ignore_env=True), {ENABLED_VAR: None, THRESHOLD_VAR: None, BUDGET_VAR: None}),
    ):
        server, _ = serve(process_env=True, faults=faults)
        try:
            with urllib.request.urlopen(f"{server.url}/spillover", timeout=5) as resp:
                report = json.load(resp)
        finally:
            server.shutdown()
            server.server_close()
        assert report["runsWith"] == expected
