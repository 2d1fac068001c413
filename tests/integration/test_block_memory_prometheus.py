"""The profile's default memory queries (`profile.memory`) on a real Prometheus: the
peak working set, the limit, restarts and OOM kills over a block, for the pods that
served it only.

There is no kubelet (cAdvisor) or kube-state-metrics here: the series they export are
served by `KubeletMetricsStandIn`, a stand-in that exposes the same metric names and
labels and whose values the test moves over time; Prometheus scrapes it as it would
scrape them (honor_labels, as a ServiceMonitor for cAdvisor keeps `namespace`/`pod`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from spillover_harness.collectors.memory import BlockMemory, read_block_memory
from spillover_harness.collectors.prometheus import PrometheusCollector
from spillover_harness.profile import MemoryQueries

MIB = 1024 * 1024
INTERVAL_S = 0.2


class KubeletMetricsStandIn:
    """STAND-IN for the kubelet's cAdvisor and kube-state-metrics endpoints (neither
    can be had here): serves `container_memory_working_set_bytes`,
    `kube_pod_container_resource_limits`, `kube_pod_container_status_restarts_total`
    and `kube_pod_container_status_last_terminated_reason` with the values set."""

    def __init__(self) -> None:
        self.lines: dict[str, float] = {}
        self._lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with stand_in._lock:
                    body = "".join(f"{k} {v}\n" for k, v in stand_in.lines.items())
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def set(self, pod: str, *, working_set: float, restarts: float, oom: bool | None) -> None:
        labels = f'namespace="clerum",pod="{pod}",container="mcp-host"'
        with self._lock:
            self.lines[f"container_memory_working_set_bytes{{{labels}}}"] = working_set
            self.lines[
                f'kube_pod_container_resource_limits{{{labels},resource="memory",unit="byte"}}'
            ] = 512 * MIB
            self.lines[f"kube_pod_container_status_restarts_total{{{labels}}}"] = restarts
            reason = (
                f'kube_pod_container_status_last_terminated_reason{{{labels},reason="OOMKilled"}}'
            )
            if oom is None:
                self.lines.pop(reason, None)
            else:
                self.lines[reason] = 1.0 if oom else 0.0


@pytest.fixture
def stand_in() -> Iterator[KubeletMetricsStandIn]:
    s = KubeletMetricsStandIn()
    s.thread.start()
    try:
        yield s
    finally:
        s.server.shutdown()
        s.server.server_close()


def _read(
    collector: PrometheusCollector,
    queries: MemoryQueries,
    pods: list[str],
    start: float,
    end: float,
) -> BlockMemory:
    """The block's memory for `pods` of namespace clerum, container mcp-host."""
    return read_block_memory(
        collector, queries, namespace="clerum", pods=pods, container="mcp-host",
        start=start, end=end,
    )  # fmt: skip


def _scrapes(n: int = 3) -> None:
    time.sleep(n * INTERVAL_S + 0.3)


def test_default_queries_give_the_block_figures_of_its_pods_only(
    prometheus_factory, stand_in: KubeletMetricsStandIn
) -> None:
    stand_in.set("mcp-host-a", working_set=100 * MIB, restarts=0, oom=None)
    stand_in.set("mcp-host-b", working_set=50 * MIB, restarts=2, oom=None)
    stand_in.set("mcp-host-other", working_set=900 * MIB, restarts=7, oom=True)
    prom = prometheus_factory([stand_in.target], scrape_interval_s=INTERVAL_S, honor_labels=True)
    _scrapes()
    start = time.time()
    _scrapes()
    stand_in.set("mcp-host-a", working_set=300 * MIB, restarts=0, oom=None)
    _scrapes()
    # pod a is OOM-killed and restarts; its working set starts again lower
    stand_in.set("mcp-host-a", working_set=120 * MIB, restarts=1, oom=True)
    _scrapes()
    end = time.time()
    _scrapes()
    collector = PrometheusCollector(prom.url, scrape_interval_s=INTERVAL_S)

    both = _read(collector, MemoryQueries(), ["mcp-host-a", "mcp-host-b"], start, end)
    assert both.notes == []
    assert (both.peak_bytes, both.limit_bytes) == (300 * MIB, 512 * MIB)
    assert (both.restarts, both.oom_kills) == (1, 1)

    # pod b alone: its restarts did not move during the block, and it has no
    # OOMKilled series: zero, not "not measured"
    b = _read(collector, MemoryQueries(), ["mcp-host-b"], start, end)
    assert (b.peak_bytes, b.restarts, b.oom_kills) == (50 * MIB, 0, 0)

    # a query that finds nothing: not measured, with a note; null queries are not run
    none = _read(
        collector,
        MemoryQueries(limit=None, restarts=None, oom_kills=None),
        ["mcp-host-gone"],
        start,
        end,
    )
    assert none.peak_bytes is None and none.limit_bytes is None
    assert none.start_bytes is None and none.end_bytes is None
    assert none.notes == [
        "memory: peak_working_set query gave no single number",
        "memory: working_set at the block's start gave no single number",
        "memory: working_set at the block's end gave no single number",
    ]
    # the pods that ran: the working set one scrape into the block and at its end
    assert both.start_bytes is not None and both.end_bytes is not None


def test_a_block_that_ended_before_its_new_pods_first_scrape_is_read_one_scrape_later(
    prometheus_factory, stand_in: KubeletMetricsStandIn
) -> None:
    """A switch made the pod and the block's one run ended before Prometheus first
    scraped it: its figures are read after that scrape, never its start."""
    prom = prometheus_factory([stand_in.target], scrape_interval_s=INTERVAL_S, honor_labels=True)
    collector = PrometheusCollector(prom.url, scrape_interval_s=INTERVAL_S)
    _scrapes()
    start = time.time()
    end = start + 0.05
    # The pod appears once every scrape stamped by the block's end is over (a scrape
    # lasts at most its timeout, one interval): one still in flight when it appeared
    # would give it a sample at or before the end.
    time.sleep(max(0.0, end + INTERVAL_S + 0.1 - time.time()))
    stand_in.set("mcp-host-new", working_set=80 * MIB, restarts=0, oom=None)
    got = _read(collector, MemoryQueries(), ["mcp-host-new"], start, end)
    assert (got.peak_bytes, got.limit_bytes, got.end_bytes) == (80 * MIB, 512 * MIB, 80 * MIB)
    assert (got.restarts, got.oom_kills) == (0, 0), got.notes
    assert got.start_bytes is None
    assert got.notes == [
        "memory: working_set at the block's start gave no single number",
        "memory: peak_working_set, limit, restarts, oom_kills, end_bytes read one scrape "
        "interval after the block's end (Prometheus had no sample of its pods by then; "
        "the pods were idle since)",
    ]


def test_an_unreachable_prometheus_leaves_every_figure_unmeasured() -> None:
    collector = PrometheusCollector("http://127.0.0.1:9", query_timeout_s=1)
    got = _read(collector, MemoryQueries(), ["mcp-host-a"], 0.0, 1.0)
    assert (got.peak_bytes, got.limit_bytes, got.restarts, got.oom_kills) == (None,) * 4
    assert got.notes and "prometheus unreachable" in got.notes[0]
