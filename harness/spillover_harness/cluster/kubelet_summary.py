"""The mcp-host's working set sampled from the kubelets' Summary API while executions
run, at a finer step than Prometheus' scrape interval.

A Prometheus peak is the highest sample at the scrape interval (15-60 s): a spike
between two scrapes is not seen. Where the API server lets the harness read a node's
Summary (`GET /api/v1/nodes/{node}/proxy/stats/summary`, RBAC `nodes/proxy` get), a
`SummarySampler` reads it every `step_s` (1 s) for the nodes that run the mcp-host
pods, keeps each pod's highest `workingSetBytes` of the mcp-host container, and the
caller takes the higher of that and the Prometheus peak (`combine_peak`), naming the
source that gave it and its step (`kubelet-summary@1s`, `prometheus@30s`). Where the
Summary cannot be read (403 without the permission, 404 or no kubelet on a kwok node,
an API server that does not answer) the sampler stops asking that node and the
Prometheus peak stands: the source says so. The kubelet refreshes its figures at its
own housekeeping interval (about 10 s by default for cAdvisor; the Summary's
`memory.time` says when): a finer step than that sees no more, so the step is an
upper bound on the resolution, not a promise of it.

A new pod has no figure until the kubelet's first housekeeping of its container, and a
configuration switch makes new pods: the block then waits (`wait_measured`) until every
running pod has one before its runs start, so that its working set at the start is a
figure of the idle pod. The sampler keeps each pod's first and last figure, and
`block_edges` takes the block's working set at its start and end from them where
Prometheus had no sample of the new pods yet.

Pure except `SummarySampler`, which never raises (a metrics source never stops a stage).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spillover_operator.client import ClientError, Connection, list_pods, node_summary

__all__ = [
    "MAX_SAMPLES",
    "STEP_S",
    "Figure",
    "PeakReading",
    "SummarySampler",
    "block_edges",
    "combine_peak",
    "source_label",
    "working_sets",
]

STEP_S = 1.0
# One sample per step for at most this many steps (an hour at 1 s): the sampler then
# stops, and the peak is the highest it saw (with Prometheus' over the whole window).
MAX_SAMPLES = 3600
# How long one node's Summary may take to answer before that sample is skipped.
SUMMARY_TIMEOUT_S = 2.0
# A number of bytes no container's working set reaches (1 PiB): anything above is bad data.
_MAX_BYTES = 1 << 50

KUBELET = "kubelet-summary"
PROMETHEUS = "prometheus"


def source_label(kind: str, step_s: float) -> str:
    """`kubelet-summary@1s`, `prometheus@30s`: where a peak came from, at what step."""
    return f"{kind}@{step_s:g}s"


def working_sets(summary: Any, namespace: str, container: str) -> dict[str, int]:
    """Pod name -> `workingSetBytes` of its container `container`, for the pods of
    `namespace` in one kubelet Summary (`pods[].podRef`, `pods[].containers[].memory`).
    Pods or containers without a whole, non-negative figure are left out (the kubelet
    omits it before its first housekeeping)."""
    out: dict[str, int] = {}
    pods = summary.get("pods") if isinstance(summary, dict) else None
    for pod in pods if isinstance(pods, list) else []:
        if not isinstance(pod, dict):
            continue
        ref = pod.get("podRef")
        if not isinstance(ref, dict) or ref.get("namespace") != namespace:
            continue
        name = ref.get("name")
        containers = pod.get("containers")
        if not isinstance(name, str) or not name or not isinstance(containers, list):
            continue
        for c in containers:
            if not isinstance(c, dict) or c.get("name") != container:
                continue
            memory = c.get("memory")
            value = memory.get("workingSetBytes") if isinstance(memory, dict) else None
            if type(value) is int and 0 <= value < _MAX_BYTES:
                out[name] = max(out.get(name, 0), value)
    return out


@dataclass(frozen=True)
class PeakReading:
    """The peak working set (None: not measured) and which source gave it, at what step
    (None: neither measured it)."""

    peak_bytes: int | None
    source: str | None


def combine_peak(
    prometheus_peak: int | None,
    prometheus_step_s: float,
    kubelet_peaks: Mapping[str, int],
    pods: list[str] | set[str],
    kubelet_step_s: float = STEP_S,
) -> PeakReading:
    """The higher of Prometheus' peak and the kubelet samples' highest for `pods` (the
    pods that served the executions); each is a lower bound of the true peak, so the
    higher is the better one. A tie goes to the finer step."""
    sampled = [kubelet_peaks[p] for p in pods if p in kubelet_peaks]
    kubelet = max(sampled) if sampled else None
    if kubelet is not None and (prometheus_peak is None or kubelet >= prometheus_peak):
        return PeakReading(kubelet, source_label(KUBELET, kubelet_step_s))
    if prometheus_peak is not None:
        return PeakReading(prometheus_peak, source_label(PROMETHEUS, prometheus_step_s))
    return PeakReading(None, None)


@dataclass(frozen=True)
class Figure:
    """One pod's working set as a Summary gave it, and when the sampler read it
    (seconds since the epoch)."""

    bytes: int
    at: float


def block_edges(
    first: Mapping[str, Figure],
    last: Mapping[str, Figure],
    pods: list[str] | set[str],
    start: float,
    end: float,
    step_s: float = STEP_S,
) -> tuple[int | None, int | None]:
    """The summed working set of `pods` at a block's start and at its end, from each
    pod's first and last sampled figure: the start only when every pod's first figure
    was read by `start` (plus one step: before its runs could move it), the end only
    when every pod's last figure was read at `end` or later (less one step). None:
    not measured, never a figure read mid-block."""
    if not pods:
        return None, None
    at_start = [first.get(p) for p in pods]
    at_end = [last.get(p) for p in pods]
    start_bytes = (
        sum(f.bytes for f in at_start if f is not None)
        if all(f is not None and f.at <= start + step_s for f in at_start)
        else None
    )
    end_bytes = (
        sum(f.bytes for f in at_end if f is not None)
        if all(f is not None and f.at >= end - step_s for f in at_end)
        else None
    )
    return start_bytes, end_bytes


class SummarySampler:
    """Samples, every `step_s` until `stop()` (at most `max_samples` times), the Summary
    of each node running a pod that `selector` matches in the connection's namespace,
    and keeps per pod the highest working set of `container` and its first and last
    figure. The pods are listed again at each step: a configuration switch may replace
    them while it runs. A node whose Summary is refused or not served is not asked
    again (`refused` says why)."""

    def __init__(
        self,
        conn: Connection,
        selector: str,
        container: str,
        *,
        step_s: float = STEP_S,
        max_samples: int = MAX_SAMPLES,
    ) -> None:
        self.conn = conn
        self.selector = selector
        self.container = container
        self.step_s = step_s
        self.max_samples = max_samples
        self.peaks: dict[str, int] = {}
        self.first: dict[str, Figure] = {}
        self.last: dict[str, Figure] = {}
        # running pods, on nodes whose Summary is read, without a figure at the last step
        # (None: no step yet)
        self.unmeasured: set[str] | None = None
        self._stepped = threading.Condition()
        self.samples = 0  # steps at which at least one Summary was read
        self.refused: dict[str, str] = {}  # node -> why its Summary is not read
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> SummarySampler:
        """Begin sampling in a thread of its own, until `stop()`."""
        self._thread = threading.Thread(target=self._loop, name="kubelet-summary", daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> SummarySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_measured(self, timeout_s: float) -> set[str]:
        """Wait until a step found a figure for every running pod on a node whose
        Summary is read (at most `timeout_s`); the pods still without one (empty: all
        measured). Pods on refused nodes are not waited for: nothing would measure them."""
        deadline = time.monotonic() + timeout_s
        with self._stepped:
            while self.unmeasured is None or self.unmeasured:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    break
                self._stepped.wait(left)
            return set(self.unmeasured or ())

    def stop(self) -> None:
        """Take one last sample's worth of time at most, then return (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        for _ in range(self.max_samples):
            self.sample_once()
            if self._stop.wait(self.step_s):
                return

    def sample_once(self) -> None:
        """One step: list the pods, read their nodes' Summaries. Never raises."""
        try:
            self._sample()
        finally:
            with self._stepped:
                self._stepped.notify_all()

    def _sample(self) -> None:
        try:
            pods = list_pods(self.conn, self.selector)
        except Exception as exc:  # never stop a stage over a metrics source
            why = exc.message if isinstance(exc, ClientError) else type(exc).__name__
            self.refused.setdefault("(pods)", why)
            if self.unmeasured is None:
                self.unmeasured = set()  # no pod known: none to wait for
            return
        nodes = sorted({node for p in pods if (node := _node_of(p))})
        read_any = False
        for node in nodes:
            if node in self.refused:
                continue
            try:
                summary = node_summary(self.conn, node, timeout=SUMMARY_TIMEOUT_S)
            except ClientError as exc:  # 403, 404, a kwok node, no answer: not again
                self.refused[node] = exc.message
                continue
            except Exception as exc:  # never stop a stage over a metrics source
                self.refused[node] = type(exc).__name__
                continue
            read_any = True
            now = time.time()
            for pod, value in working_sets(summary, self.conn.namespace, self.container).items():
                self.peaks[pod] = max(self.peaks.get(pod, 0), value)
                self.first.setdefault(pod, Figure(value, now))
                self.last[pod] = Figure(value, now)
        self.samples += read_any
        self.unmeasured = {
            name
            for p in pods
            if (name := str((p.get("metadata") or {}).get("name") or ""))
            and _running(p)
            and _node_of(p) not in self.refused
            and name not in self.first
        }


def _node_of(pod: Any) -> str:
    """The node a pod is bound to; "" while it is not scheduled."""
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _running(pod: Any) -> bool:
    """Running and not being deleted: a pod whose container the kubelet measures."""
    deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
    return not deleting and (pod.get("status") or {}).get("phase") == "Running"
