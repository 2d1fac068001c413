"""The mcp-host's two spillover counters, in their own registry (one per mcp-host)."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

PERSISTED_METRIC = "clerum_workflow_step_spillover_persisted_total"
READS_METRIC = "clerum_workflow_step_spillover_reads_total"
# The first-party (chat) spillover's counters: workflow runs must never move them.
FIRST_PARTY_PERSISTED_METRIC = "clerum_spillover_persisted_total"
FIRST_PARTY_READS_METRIC = "clerum_spillover_reads_total"
# The first-party path's histogram of tool output sizes (label `tool`), with its buckets.
FIRST_PARTY_OUTPUT_METRIC = "clerum_tool_output_bytes"
FIRST_PARTY_OUTPUT_BUCKETS = tuple(
    float(kib * 1024) for kib in (1, 4, 8, 16, 64, 256, 1024, 4096, 16384)
)


class SpilloverMetrics:
    """`clerum_workflow_step_spillover_persisted_total{tool}` and
    `clerum_workflow_step_spillover_reads_total{with_range}` ("true"/"false"), and the
    first-party metrics a workflow run must never move (`clerum_spillover_*_total`,
    the histogram `clerum_tool_output_bytes{tool}`): exported so a check can see them
    stay still, fed only by the `feed_first_party` fault.

    `reset()` models an mcp-host restart: a fresh process starts its counters
    at zero (Prometheus sees a counter reset).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._build()

    def _build(self) -> None:
        self.registry = CollectorRegistry()
        # prometheus_client appends `_total` to a counter's name.
        self._persisted = Counter(
            PERSISTED_METRIC.removesuffix("_total"),
            "Tool results kept out of the prompt by workflow step spillover.",
            ["tool"],
            registry=self.registry,
        )
        self._reads = Counter(
            READS_METRIC.removesuffix("_total"),
            "Reads of spilled tool results through clerum__spillover_read.",
            ["with_range"],
            registry=self.registry,
        )
        self._first_persisted = Counter(
            FIRST_PARTY_PERSISTED_METRIC.removesuffix("_total"),
            "Tool results stored by the first-party spillover.",
            registry=self.registry,
        )
        self._first_reads = Counter(
            FIRST_PARTY_READS_METRIC.removesuffix("_total"),
            "Reads of results stored by the first-party spillover.",
            registry=self.registry,
        )
        self._first_output = Histogram(
            FIRST_PARTY_OUTPUT_METRIC,
            "Distribution of tool output sizes seen by the first-party path, in bytes.",
            ["tool"],
            buckets=FIRST_PARTY_OUTPUT_BUCKETS,
            registry=self.registry,
        )

    def persisted(self, tool: str) -> None:
        with self._lock:
            self._persisted.labels(tool=tool).inc()

    def read(self, with_range: bool) -> None:
        with self._lock:
            self._reads.labels(with_range="true" if with_range else "false").inc()

    def first_party(self, *, read: bool) -> None:
        """FAULT (`feed_first_party`): a workflow event counted on a first-party counter."""
        with self._lock:
            (self._first_reads if read else self._first_persisted).inc()

    def first_party_output(self, tool: str, size: int) -> None:
        """FAULT (`feed_first_party`): a workflow tool result observed on the first-party
        histogram `clerum_tool_output_bytes`."""
        with self._lock:
            self._first_output.labels(tool=tool).observe(size)

    def reset(self) -> None:
        with self._lock:
            self._build()

    def exposition(self) -> bytes:
        """The Prometheus text format of the current counters."""
        with self._lock:
            registry = self.registry
        return generate_latest(registry)

    def value(self, metric: str, **labels: str) -> float:
        """The current value of one series (0.0 when it does not exist yet)."""
        with self._lock:
            registry = self.registry
        value = registry.get_sample_value(metric, labels)
        return 0.0 if value is None else value
