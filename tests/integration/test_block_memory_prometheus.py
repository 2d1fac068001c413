"""The profile's default memory queries (`profile.memory`) on a real Prometheus: the
peak working set, the limit, restarts and OOM kills over a block, for the pods that
served it only; and the figures it had no sample of by the block's end, read from its
later samples (`read_later`) without a sample of what ran on the pods afterwards.

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
from k8s_helpers import wait_for
from prometheus.server import PrometheusServer
from spillover_harness.collectors.memory import (
    BlockMemory,
    MemoryWindow,
    read_block_memory,
    read_later,
    wait_for_later_scrape,
)
from spillover_harness.collectors.prometheus import PrometheusCollector
from spillover_harness.profile import MemoryQueries

MIB = 1024 * 1024
INTERVAL_S = 0.2
# A profile's scrape interval longer than Prometheus' here: the later read may then look
# that far past a block's end, so a test waits for the scrape it needs, never races it.
PROFILE_INTERVAL_S = 10.0


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
    return read_block_memory(collector, queries, _window(pods, start, end))


def _window(pods: list[str], start: float, end: float) -> MemoryWindow:
    return MemoryWindow("clerum", tuple(pods), "mcp-host", start, end)


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

    # a query that finds nothing: not measured, with a note (the end's once Prometheus'
    # later samples had nothing either); null queries are not run
    queries = MemoryQueries(limit=None, restarts=None, oom_kills=None)
    none = _read(collector, queries, ["mcp-host-gone"], start, end)
    assert none.pending == ["peak_working_set", "end_bytes"]
    read_later(collector, queries, none, _window(["mcp-host-gone"], start, end), until=time.time())
    assert none.peak_bytes is None and none.limit_bytes is None
    assert none.start_bytes is None and none.end_bytes is None
    assert none.notes == [
        "memory: working_set at the block's start gave no single number",
        "memory: peak_working_set query gave no single number",
        "memory: working_set at the block's end gave no single number",
    ]
    # the pods that ran: the working set one scrape into the block and at its end
    assert both.start_bytes is not None and both.end_bytes is not None


def _new_pod_after_the_end(
    stand_in: KubeletMetricsStandIn, pod: str, working_set: float = 80 * MIB
) -> tuple[float, float]:
    """A block of one short run whose pod (made by the switch) appears once every scrape
    stamped by the block's end is over."""
    _scrapes()
    start = time.time()
    end = start + 0.05
    _set_after_scrapes_stamped_by(end, stand_in, pod, working_set)
    return start, end


def _set_after_scrapes_stamped_by(
    at: float, stand_in: KubeletMetricsStandIn, pod: str, working_set: float
) -> None:
    """The pod's working set set once every scrape stamped by `at` is over (a scrape
    lasts at most its timeout, one interval: one still in flight would give the new
    value a sample at or before `at`)."""
    time.sleep(max(0.0, at + INTERVAL_S + 0.1 - time.time()))
    stand_in.set(pod, working_set=working_set, restarts=0, oom=None)


def _scraped(prom: PrometheusServer, pod: str, working_set: float) -> bool:
    """Prometheus holds `working_set` as the pod's latest sample."""
    data = prom.api("/api/v1/query", query=f'container_memory_working_set_bytes{{pod="{pod}"}}')
    result = data["result"] if isinstance(data, dict) else []
    return any(float(s["value"][1]) == working_set for s in result)


LATER = (
    "memory: peak_working_set, limit, restarts, oom_kills, end_bytes read from "
    "Prometheus' samples after the block's end (it had none of its pods by then), at "
    "most one scrape interval later and before anything else ran on them"
)


def test_a_block_that_ended_before_its_new_pods_first_scrape_is_read_after_the_stage(
    prometheus_factory, stand_in: KubeletMetricsStandIn
) -> None:
    """A switch made the pod and the block's one run ended before Prometheus first
    scraped it: nothing waits at the block's end; its figures are read from the later
    scrape once the stage has moved on, never its start."""
    prom = prometheus_factory([stand_in.target], scrape_interval_s=INTERVAL_S, honor_labels=True)
    collector = PrometheusCollector(prom.url, scrape_interval_s=PROFILE_INTERVAL_S)
    start, end = _new_pod_after_the_end(stand_in, "mcp-host-new")
    got = _read(collector, MemoryQueries(), ["mcp-host-new"], start, end)
    assert got.pending == ["peak_working_set", "limit", "restarts", "oom_kills", "end_bytes"]
    assert (got.peak_bytes, got.limit_bytes, got.end_bytes, got.peak_source) == (None,) * 4
    assert got.notes == ["memory: working_set at the block's start gave no single number"]

    wait_for("Prometheus to scrape the new pod", lambda: _scraped(prom, "mcp-host-new", 80 * MIB))
    window = _window(["mcp-host-new"], start, end)
    read_later(collector, MemoryQueries(), got, window, until=time.time())
    assert (got.peak_bytes, got.limit_bytes, got.end_bytes) == (80 * MIB, 512 * MIB, 80 * MIB)
    assert (got.restarts, got.oom_kills) == (0, 0), got.notes
    assert (got.start_bytes, got.peak_source, got.pending) == (
        None,
        f"prometheus@{PROFILE_INTERVAL_S:g}s",
        [],
    )
    assert got.notes == ["memory: working_set at the block's start gave no single number", LATER]


def test_the_later_read_stops_where_a_later_block_began_on_the_same_pod(
    prometheus_factory, stand_in: KubeletMetricsStandIn
) -> None:
    """The pod served the next block too: what it held in that block's runs is not this
    block's, however soon it came. The profile's interval is longer than the scrapes
    here, so only `until` keeps the next block's sample out."""
    prom = prometheus_factory([stand_in.target], scrape_interval_s=INTERVAL_S, honor_labels=True)
    collector = PrometheusCollector(prom.url, scrape_interval_s=PROFILE_INTERVAL_S)
    start, end = _new_pod_after_the_end(stand_in, "mcp-host-kept")
    got = _read(collector, MemoryQueries(), ["mcp-host-kept"], start, end)
    wait_for("Prometheus to scrape the idle pod", lambda: _scraped(prom, "mcp-host-kept", 80 * MIB))
    next_block = time.time()
    _set_after_scrapes_stamped_by(next_block, stand_in, "mcp-host-kept", 300 * MIB)
    wait_for("the next block's load", lambda: _scraped(prom, "mcp-host-kept", 300 * MIB))
    window = _window(["mcp-host-kept"], start, end)
    unbounded = BlockMemory(pending=list(got.pending))

    read_later(collector, MemoryQueries(), got, window, until=next_block)
    assert (got.peak_bytes, got.end_bytes) == (80 * MIB, 80 * MIB), got.notes
    # read up to now instead, the next block's load would pass for this block's peak
    read_later(collector, MemoryQueries(), unbounded, window, until=time.time())
    assert unbounded.peak_bytes == 300 * MIB, unbounded.notes


def test_a_figure_with_no_sample_before_the_next_block_stays_unmeasured(
    prometheus_factory, stand_in: KubeletMetricsStandIn
) -> None:
    """Prometheus first scraped the pod once the next block had begun on it (just after
    this block's end): the figures are null, each with its note, never a sample of the
    next block."""
    prom = prometheus_factory([stand_in.target], scrape_interval_s=INTERVAL_S, honor_labels=True)
    collector = PrometheusCollector(prom.url, scrape_interval_s=INTERVAL_S)
    start, end = _new_pod_after_the_end(stand_in, "mcp-host-late", 300 * MIB)
    next_block = end + 0.05  # before the pod appeared (see _set_after_scrapes_stamped_by)
    got = _read(collector, MemoryQueries(), ["mcp-host-late"], start, end)
    wait_for("the next block's load", lambda: _scraped(prom, "mcp-host-late", 300 * MIB))
    window = _window(["mcp-host-late"], start, end)
    read_later(collector, MemoryQueries(), got, window, until=next_block)
    assert (got.peak_bytes, got.limit_bytes, got.end_bytes, got.restarts) == (None,) * 4
    assert got.notes[1:] == [
        "memory: peak_working_set query gave no single number",
        "memory: limit query gave no single number",
        "memory: restarts query gave no single number",
        "memory: oom_kills query gave no single number",
        "memory: working_set at the block's end gave no single number",
    ]


def test_the_lane_waits_for_the_later_scrape_before_its_next_point(
    prometheus_factory, stand_in: KubeletMetricsStandIn
) -> None:
    """A lane point cannot be read later (its next point runs on the same pods at once):
    it waits for the scrape after its end, then reads it."""
    prom = prometheus_factory([stand_in.target], scrape_interval_s=INTERVAL_S, honor_labels=True)
    collector = PrometheusCollector(prom.url, scrape_interval_s=INTERVAL_S)
    start, end = _new_pod_after_the_end(stand_in, "mcp-host-lane")
    got = _read(collector, MemoryQueries(), ["mcp-host-lane"], start, end)
    until = wait_for_later_scrape(collector, end)
    read_later(collector, MemoryQueries(), got, _window(["mcp-host-lane"], start, end), until=until)
    assert (got.peak_bytes, got.limit_bytes, got.end_bytes) == (80 * MIB, 512 * MIB, 80 * MIB)
    assert got.notes[-1] == LATER


def test_an_unreachable_prometheus_leaves_every_figure_unmeasured() -> None:
    collector = PrometheusCollector("http://127.0.0.1:9", query_timeout_s=1)
    got = _read(collector, MemoryQueries(), ["mcp-host-a"], 0.0, 1.0)
    assert (got.peak_bytes, got.limit_bytes, got.restarts, got.oom_kills) == (None,) * 4
    assert got.notes and "prometheus unreachable" in got.notes[0]
