"""The Prometheus collector against a REAL Prometheus (the pinned 3.x `make prometheus`
builds, started on 127.0.0.1 with a 200 ms scrape interval) scraping the simulator
served over HTTP.

The simulator's own per-run counts (`spilloverPersisted`, `spilloverReads` in
`GET /runs/{id}`) are the truth the collector's deltas must equal. Needs the
`prometheus_factory` fixture (tests/prometheus/pytest_plugin.py) and the binary
(`make prometheus`).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus.server import PrometheusServer, free_port
from spillover_harness.collectors.prometheus import (
    PERSISTED,
    READS,
    PrometheusCollector,
    RunCounters,
)
from spillover_harness.sim.server import SimServer, serve

INTERVAL = 0.2
SELECTOR = 'namespace="clerum"'
LABELS = {"namespace": "clerum", "container": "mcp-host"}
OFF = {"CLERUM_WORKFLOW_TOOL_SPILLOVER_ENABLED": "false"}
T32 = {"CLERUM_WORKFLOW_TOOL_SPILLOVER_THRESHOLD": "32768"}
RUN_TIMEOUT_S = 60.0


class Sim:
    """The simulator over HTTP, as the harness sees it."""

    def __init__(self, server: SimServer | None, url: str | None = None) -> None:
        self.server = server
        self.url = url or (server.url if server is not None else "")
        self.target = self.url.removeprefix("http://")
        self._n = 0

    @classmethod
    def at(cls, url: str) -> Sim:
        return cls(None, url)

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            time.sleep(0.05)
        raise AssertionError(f"simulator at {self.url} not healthy after {timeout_s}s")

    def run(
        self, recipe: str, input_name: str, env: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Start a run and poll it to its end; returns its final status."""
        self._n += 1
        run_id = f"r{self._n}-{recipe}-{input_name}"
        resp = requests.post(
            f"{self.url}/runs",
            json={
                "recipe": recipe,
                "input": input_name,
                "env": env or {},
                "seed": 7,
                "run_id": run_id,
            },
            timeout=10,
        )
        assert resp.status_code == 202, resp.text
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            status: dict[str, Any] = requests.get(f"{self.url}/runs/{run_id}", timeout=10).json()
            if status["phase"] not in ("Pending", "Running"):
                assert status["phase"] == "Succeeded", status
                return status
            time.sleep(0.02)
        raise AssertionError(f"run {run_id} did not finish in {RUN_TIMEOUT_S}s")

    def restart(self) -> None:
        resp = requests.post(f"{self.url}/admin/restart", timeout=10)
        assert resp.status_code == 200, resp.text


@pytest.fixture
def sim() -> Iterator[Sim]:
    server, thread = serve(host="127.0.0.1", port=0)
    try:
        yield Sim(server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def prom(sim: Sim, prometheus_factory: Callable[..., PrometheusServer]) -> PrometheusServer:
    return prometheus_factory([sim.target], scrape_interval_s=INTERVAL, labels=LABELS)


def collector_for(prom: PrometheusServer, **kwargs: Any) -> PrometheusCollector:
    options: dict[str, Any] = {"selectors": SELECTOR, "scrape_interval_s": INTERVAL}
    options.update(kwargs)
    return PrometheusCollector(prom.url, **options)


def measured_run(
    collector: PrometheusCollector,
    sim: Sim,
    recipe: str,
    input_name: str,
    env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], RunCounters]:
    start = collector.begin_run()
    assert start.snapshot is not None, start.note
    status = sim.run(recipe, input_name, env)
    finished = time.time()
    return status, collector.end_run_detail(finished, start)


def test_deltas_equal_the_simulators_own_counts(sim: Sim, prom: PrometheusServer) -> None:
    c = collector_for(prom)

    # Spillover off, before any run ever spilled: the counters have no series at all.
    # The simulator counted 0, but nothing was measured: None, not 0.
    status, res = measured_run(c, sim, "code-review", "small", OFF)
    assert (status["spilloverPersisted"], status["spilloverReads"]) == (0, 0)
    assert (res.persisted, res.reads) == (None, None)
    assert any("not measured" in n for n in res.notes)

    seen_positive = False
    for recipe, input_name, env in [
        ("code-review", "large", {}),  # spills and reads: the series appear
        ("summarize", "document", {}),  # ~100 KiB < 128 KiB: spills nothing, series exist: 0
        ("summarize", "document", T32),
        ("code-review", "small", OFF),  # off again, now with series: 0, not None
        ("code-review", "medium", T32),
        ("code-review", "large", {}),
    ]:
        status, res = measured_run(c, sim, recipe, input_name, env)
        persisted: int = status["spilloverPersisted"]
        reads: int = status["spilloverReads"]
        assert (res.persisted, res.reads) == (persisted, reads), (recipe, input_name, res.notes)
        assert res.notes == []
        seen_positive = seen_positive or (persisted > 0 and reads > 0)
        # The breakdown adds up to the totals.
        assert res.deltas is not None
        assert sum(res.deltas["persisted_by_tool"].values()) == res.persisted
        assert sum(res.deltas["reads_by_with_range"].values()) == res.reads
    assert seen_positive, "no run spilled anything: the test would prove nothing"

    # end_run's plain triple is the same numbers.
    start = c.begin_run()
    status = sim.run("summarize", "document", T32)
    triple = c.end_run(time.time(), start)
    assert triple == (status["spilloverPersisted"], status["spilloverReads"], [])


def test_counter_reset_inside_the_window(sim: Sim, prom: PrometheusServer) -> None:
    c = collector_for(prom)
    first, _ = measured_run(c, sim, "code-review", "large")
    second, _ = measured_run(c, sim, "code-review", "large")
    assert first["spilloverPersisted"] > 0 and first["spilloverReads"] > 0
    # Same recipe, input and seed: the simulator is deterministic.
    assert second["spilloverPersisted"] == first["spilloverPersisted"]

    # The mcp-host restarts after the start snapshot: every counter starts again at 0.
    start = c.begin_run()
    assert start.snapshot is not None
    assert sum(start.snapshot.persisted.values()) == first["spilloverPersisted"] * 2
    sim.restart()
    status = sim.run("code-review", "large")
    res = c.end_run_detail(time.time(), start)

    assert (res.persisted, res.reads) == (status["spilloverPersisted"], status["spilloverReads"])
    assert res.deltas is not None
    before_series = [s for s in res.deltas["series"] if s["before"] is not None]
    assert before_series and all(s["reset"] for s in before_series)
    assert any("reset" in n for n in res.notes)


def test_counter_reset_between_runs(sim: Sim, prom: PrometheusServer) -> None:
    c = collector_for(prom)
    measured_run(c, sim, "code-review", "large")
    sim.restart()
    # The next run starts right away, whether or not Prometheus scraped the restart yet.
    for recipe, input_name, env in [
        ("summarize", "document", T32),
        ("code-review", "medium", T32),
    ]:
        status, res = measured_run(c, sim, recipe, input_name, env)
        assert (res.persisted, res.reads) == (
            status["spilloverPersisted"],
            status["spilloverReads"],
        ), res.notes


def test_prometheus_stopped_mid_stage(
    sim: Sim, prom: PrometheusServer, prometheus_factory: Callable[..., PrometheusServer]
) -> None:
    c = collector_for(prom)
    measured_run(c, sim, "code-review", "large")

    start = c.begin_run()
    assert start.snapshot is not None
    sim.run("code-review", "large")
    url = prom.url
    prom.stop()
    assert not prom.is_running()

    persisted, reads, notes = c.end_run(time.time(), start)  # must not raise
    assert (persisted, reads) == (None, None)
    assert len(notes) == 1 and notes[0].startswith(f"prometheus unreachable at {url}: ")

    # Down at the start too: still nulls and a note, never an exception.
    start = c.begin_run()
    assert start.snapshot is None and start.note is not None
    sim.run("summarize", "document", T32)
    persisted, reads, notes = c.end_run(time.time(), start)
    assert (persisted, reads) == (None, None)
    assert notes == [f"prometheus unreachable at {url}: connection refused"]

    # The stage goes on: with Prometheus back, the next run is measured again.
    back = prometheus_factory([sim.target], scrape_interval_s=INTERVAL, labels=LABELS)
    status, res = measured_run(collector_for(back), sim, "code-review", "medium", T32)
    assert (res.persisted, res.reads) == (status["spilloverPersisted"], status["spilloverReads"])


def test_end_snapshot_waits_two_scrape_intervals_past_the_run(
    sim: Sim, prom: PrometheusServer
) -> None:
    c = collector_for(prom)
    status, res = measured_run(c, sim, "code-review", "large")
    assert res.end_snapshot is not None and res.deadline is not None
    start = res.end_snapshot
    # The deadline is the run's end + 2 intervals in Prometheus' clock (same machine:
    # the measured skew is tiny), and every target was scraped at or after it before
    # the end snapshot was evaluated.
    assert start.scrape_times
    assert min(start.scrape_times.values()) >= res.deadline
    assert start.at >= res.deadline
    assert all(up == 1 for up in start.up.values())
    assert (res.persisted, res.reads) == (status["spilloverPersisted"], status["spilloverReads"])

    # Prometheus' own record agrees: the sample the end snapshot used is newer than the deadline.
    data = prom.api(
        "/api/v1/query", query=f"timestamp({PERSISTED}{{{SELECTOR}}})", time=str(start.at)
    )
    assert isinstance(data, dict)
    assert data["result"] and all(float(s["value"][1]) >= res.deadline for s in data["result"])


def test_selector_matching_nothing_is_not_measured(sim: Sim, prom: PrometheusServer) -> None:
    c = collector_for(prom, selectors='namespace="elsewhere"')
    measured_run(collector_for(prom), sim, "code-review", "large")  # series exist, elsewhere
    start = c.begin_run()
    assert start.snapshot is not None
    sim.run("code-review", "large")
    persisted, reads, notes = c.end_run(time.time(), start)
    assert (persisted, reads) == (None, None)
    assert any("no `up` series matched" in n for n in notes)
    assert any(PERSISTED in n and "not measured" in n for n in notes)
    assert any(READS in n and "not measured" in n for n in notes)


def test_bearer_token_file(sim: Sim, prom: PrometheusServer, tmp_path: Path) -> None:
    missing = collector_for(prom, bearer_token_file=tmp_path / "no-such-token")
    start = missing.begin_run()
    assert start.snapshot is None
    persisted, reads, notes = missing.end_run(time.time(), start)
    assert (persisted, reads) == (None, None)
    assert len(notes) == 1 and "no-such-token" in notes[0] and "unreadable" in notes[0]

    # Prometheus without auth ignores the header: the token file is read and the run measured.
    token = tmp_path / "token"
    token.write_text("s3cret\n", encoding="utf-8")
    status, res = measured_run(
        collector_for(prom, bearer_token_file=token), sim, "code-review", "large"
    )
    assert (res.persisted, res.reads) == (status["spilloverPersisted"], status["spilloverReads"])


def test_probe_for_preflight(sim: Sim, prom: PrometheusServer) -> None:
    ok, message = collector_for(prom).probe()
    assert ok, message
    assert "1 target(s)" in message

    ok, message = collector_for(prom, selectors='namespace="elsewhere"').probe()
    assert not ok and "no target matching" in message

    url = prom.url
    prom.stop()
    ok, message = collector_for(prom).probe()
    assert not ok and message == f"prometheus unreachable at {url}: connection refused"


def test_mcp_host_down_at_the_end_is_not_measured(
    tmp_path: Path, prometheus_factory: Callable[..., PrometheusServer]
) -> None:
    # The simulator in its own process, so that it can really go away.
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "spillover_harness.sim.server", "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        sim = Sim.at(f"http://127.0.0.1:{port}")
        sim.wait_healthy()
        prom = prometheus_factory([sim.target], scrape_interval_s=INTERVAL, labels=LABELS)
        c = collector_for(prom)
        measured_run(c, sim, "code-review", "large")
        start = c.begin_run()
        assert start.snapshot is not None
        sim.run("code-review", "large")
        proc.terminate()  # the mcp-host is gone: its scrapes fail, up == 0
        proc.wait(timeout=30)
        res = c.end_run_detail(time.time(), start)
        assert (res.persisted, res.reads) == (None, None)
        assert len(res.notes) == 1 and "down at the end of the run" in res.notes[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
