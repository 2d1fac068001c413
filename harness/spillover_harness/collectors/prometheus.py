"""Spillover counters from Prometheus: per-run deltas of two instant snapshots.

Why not `increase()`: `increase()` extrapolates over the range and guesses at
the edges; a run's count is an exact small integer. We take an instant snapshot
of every counter series before the run and another one after it, and subtract
per series:

- a series whose value went down restarted (the mcp-host restarted and its
  counters began again at 0): its delta is its value after (increments made
  before the restart but after the first snapshot are lost; a note says so);
- a series whose `process_start_time_seconds` (same target) changed restarted
  too, even if its value went up;
- a series present only after counts its whole value (first use of a label set,
  or a new pod);
- a series present only before (its pod went away) counts 0, with a note;
- no series at all, before or after, is None ("not measured"), never 0;
- every matched target down at the end snapshot: None for both, with a note.

The end snapshot waits until Prometheus holds a scrape of every matched target
newer than the run's end + two scrape intervals (the `timestamp()` of `up`,
corrected for the clock difference between this machine and Prometheus), so the
run's last increments are in it.

Counters are per mcp-host process, not per run: deltas belong to one run only
when nothing else uses the same mcp-host between the snapshots (a pod per run,
or runs serialized per mcp-host). See docs/cluster-profile.md.

Nothing here raises for an unreachable Prometheus: `PrometheusCollector`
turns any failure into (None, None, [note]).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict

import requests
from prometheus_api_client import PrometheusConnect
from spillover_operator.regular_file import read_regular
from urllib3.util.retry import Retry

from spillover_harness.profile import PrometheusSource

TOKEN_MAX_BYTES = 64 * 1024  # a bearer token is a few KiB at most

PERSISTED = "clerum_workflow_step_spillover_persisted_total"
READS = "clerum_workflow_step_spillover_reads_total"
START_TIME = "process_start_time_seconds"

# The per-metric label that splits each counter (summed over for the record).
METRIC_LABEL = {PERSISTED: "tool", READS: "with_range"}

Labels = frozenset[tuple[str, str]]
"""A series' identity: its labels without `__name__`."""


@dataclass(frozen=True)
class CounterSnapshot:
    """Every matched series of the two counters at one instant."""

    at: float  # Prometheus' evaluation time (seconds since the epoch)
    persisted: dict[Labels, float]
    reads: dict[Labels, float]
    start_times: dict[Labels, float] = field(default_factory=dict)  # target -> process start
    scrape_times: dict[Labels, float] = field(default_factory=dict)  # target -> last `up` sample
    up: dict[Labels, float] = field(default_factory=dict)  # target -> `up` value


class SeriesDelta(TypedDict):
    metric: str
    labels: dict[str, str]
    before: float | None
    after: float | None
    delta: int
    reset: bool


class CounterDeltas(TypedDict):
    persisted: int | None  # summed over `tool`; None = no series at all
    reads: int | None  # summed over `with_range`; None = no series at all
    persisted_by_tool: dict[str, int]
    reads_by_with_range: dict[str, int]
    series: list[SeriesDelta]
    notes: list[str]


# --------------------------------------------------------------------------- queries


def _selector(*matchers: str) -> str:
    return "{" + ", ".join(m.strip().rstrip(",") for m in matchers if m.strip()) + "}"


def exact_regex(values: Sequence[str]) -> str:
    """A PromQL regex string body (PromQL anchors it) matching exactly `values`, escaped
    for a double-quoted PromQL literal (Go escapes: the regex's backslashes doubled)."""
    regex = "|".join(re.escape(v) for v in sorted(set(values))) or "^$"
    return regex.replace("\\", "\\\\")


def _labels(metric: Mapping[str, str]) -> Labels:
    return frozenset((k, v) for k, v in metric.items() if k != "__name__")


def format_labels(labels: Labels) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels)) + "}"


def _target(labels: Labels, metric: str) -> Labels:
    own = METRIC_LABEL.get(metric)
    return frozenset((k, v) for k, v in labels if k != own)


def _vector(prom: PrometheusConnect, query: str) -> list[dict[str, Any]]:
    result = prom.custom_query(query)
    if not isinstance(result, list):
        raise ValueError(f"expected an instant vector for {query!r}, got {type(result).__name__}")
    return result


def prometheus_time(prom: PrometheusConnect) -> float:
    """Prometheus' own clock (the evaluation time of `time()`)."""
    result = prom.custom_query("time()")
    # A scalar result is [<eval time>, "<value>"]
    return float(result[0])


def scrape_times(prom: PrometheusConnect, selectors: str) -> dict[Labels, tuple[float, float]]:
    """target -> (timestamp of its last scrape, `up` value) for every matched target."""
    times = {
        _labels(s["metric"]): float(s["value"][1])
        for s in _vector(prom, f"timestamp(up{_selector(selectors)})")
    }
    ups = {
        _labels(s["metric"]): float(s["value"][1])
        for s in _vector(prom, f"up{_selector(selectors)}")
    }
    return {t: (ts, ups.get(t, math.nan)) for t, ts in times.items()}


def snapshot(prom: PrometheusConnect, selectors: str = "") -> CounterSnapshot:
    """One instant query for both counters and the processes' start times.

    `selectors` is a list of PromQL label matchers without braces
    (`namespace="clerum", container="mcp-host"`). Raises on any failure
    (the collector turns that into a note).
    """
    names = "|".join((PERSISTED, READS, START_TIME))
    result = _vector(prom, _selector(f'__name__=~"{names}"', selectors))
    persisted: dict[Labels, float] = {}
    reads: dict[Labels, float] = {}
    starts: dict[Labels, float] = {}
    at = time.time()
    for sample in result:
        metric = sample["metric"]
        at = float(sample["value"][0])
        value = float(sample["value"][1])
        name = metric.get("__name__")
        labels = _labels(metric)
        if name == PERSISTED:
            persisted[labels] = value
        elif name == READS:
            reads[labels] = value
        elif name == START_TIME:
            starts[labels] = value
    targets = scrape_times(prom, selectors)
    return CounterSnapshot(
        at=at,
        persisted=persisted,
        reads=reads,
        start_times=starts,
        scrape_times={t: ts for t, (ts, _) in targets.items()},
        up={t: up for t, (_, up) in targets.items()},
    )


# --------------------------------------------------------------------------- deltas


def _metric_deltas(
    metric: str,
    before: Mapping[Labels, float],
    after: Mapping[Labels, float],
    starts_before: Mapping[Labels, float],
    starts_after: Mapping[Labels, float],
    notes: list[str],
) -> tuple[int | None, dict[str, int], list[SeriesDelta]]:
    if not before and not after:
        return None, {}, []
    own = METRIC_LABEL[metric]
    total = 0
    by_label: dict[str, int] = {}
    series: list[SeriesDelta] = []
    for labels in sorted(set(before) | set(after), key=sorted):
        b = before.get(labels)
        a = after.get(labels)
        reset = False
        if a is None:
            delta = 0
            notes.append(
                f"{metric}{format_labels(labels)} disappeared between the snapshots "
                "(its process went away): increments after its last scrape are not counted"
            )
        elif b is None:
            delta = round(a)
        else:
            target = _target(labels, metric)
            sb, sa = starts_before.get(target), starts_after.get(target)
            restarted = sb is not None and sa is not None and sa != sb
            if a < b or restarted:
                reset = True
                delta = round(a)
                notes.append(
                    f"{metric}{format_labels(labels)} was reset between the snapshots "
                    "(the mcp-host restarted): counted from 0 after the restart; increments "
                    "before the restart are not counted"
                )
            else:
                delta = round(a - b)
        total += delta
        key = dict(labels).get(own, "")
        by_label[key] = by_label.get(key, 0) + delta
        series.append(
            SeriesDelta(
                metric=metric,
                labels=dict(sorted(labels)),
                before=b,
                after=a,
                delta=delta,
                reset=reset,
            )
        )
    return total, by_label, series


def counter_deltas(before: CounterSnapshot, after: CounterSnapshot) -> CounterDeltas:
    """Per-run deltas of the two counters between two snapshots (see the module doc)."""
    notes: list[str] = []
    persisted, by_tool, s1 = _metric_deltas(
        PERSISTED, before.persisted, after.persisted, before.start_times, after.start_times, notes
    )
    reads, by_range, s2 = _metric_deltas(
        READS, before.reads, after.reads, before.start_times, after.start_times, notes
    )
    for metric, value in ((PERSISTED, persisted), (READS, reads)):
        if value is None:
            notes.append(f"{metric}: no series matched, before or after the run (not measured)")
    return CounterDeltas(
        persisted=persisted,
        reads=reads,
        persisted_by_tool=by_tool,
        reads_by_with_range=by_range,
        series=s1 + s2,
        notes=notes,
    )


# --------------------------------------------------------------------------- the collector


class PrometheusUnavailable(Exception):
    """Prometheus could not be queried; the message is the note for the record."""


@dataclass(frozen=True)
class RunStart:
    """What `begin_run` saw: a snapshot, or why there is none."""

    snapshot: CounterSnapshot | None
    note: str | None


@dataclass
class RunCounters:
    """The full result of `end_run`, for callers that want more than the triple."""

    persisted: int | None
    reads: int | None
    notes: list[str]
    deltas: CounterDeltas | None = None
    end_snapshot: CounterSnapshot | None = None
    deadline: float | None = None  # the scrape time (Prometheus clock) the end snapshot waited for


class PrometheusCollector:
    """Counts a run's spillover events from Prometheus.

    `begin_run()` snapshots the counters; `end_run(run_finished_at)` waits until
    Prometheus has scraped every matched target two scrape intervals past the
    run's end, snapshots again and returns `(persisted, reads, notes)`.

    Safe to share between threads when each run keeps the `RunStart` that
    `begin_run` returns and passes it to `end_run`; without it, `end_run` uses
    the last `begin_run` of this collector.
    """

    def __init__(
        self,
        url: str,
        *,
        selectors: str = "",
        scrape_interval_s: float = 15.0,
        bearer_token_file: str | Path | None = None,
        verify_tls: bool = True,
        query_timeout_s: float = 10.0,
        max_extra_wait_s: float | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self.selectors = selectors
        self.scrape_interval_s = scrape_interval_s
        self.bearer_token_file = Path(bearer_token_file) if bearer_token_file else None
        self.verify_tls = verify_tls
        self.query_timeout_s = query_timeout_s
        # How long past the deadline to keep waiting for a scrape before giving up.
        self.max_extra_wait_s = (
            max_extra_wait_s
            if max_extra_wait_s is not None
            else 5 * scrape_interval_s + query_timeout_s
        )
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._last_start: RunStart | None = None
        self.last_result: RunCounters | None = None

    @classmethod
    def from_profile(cls, source: PrometheusSource) -> PrometheusCollector:
        return cls(
            source.url,
            selectors=source.selector,
            scrape_interval_s=source.scrape_interval_s,
            bearer_token_file=source.bearer_token_file,
            verify_tls=source.verify_tls,
            query_timeout_s=source.query_timeout_s,
        )

    # -- connection ------------------------------------------------------------------

    def connect(self) -> PrometheusConnect:
        """A client with the current bearer token (re-read each time: tokens rotate)."""
        headers: dict[str, str] = {}
        if self.bearer_token_file is not None:
            try:
                # a FIFO or device is refused, never waited on; a token is bounded
                raw = read_regular(self.bearer_token_file, TOKEN_MAX_BYTES)
                token = raw.decode("utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise PrometheusUnavailable(
                    f"prometheus bearer token file {self.bearer_token_file} unreadable: "
                    f"{getattr(exc, 'strerror', None) or exc}; pass a regular file holding "
                    "the token"
                ) from None
            headers["Authorization"] = f"Bearer {token}"
        return PrometheusConnect(
            url=self.url,
            headers=headers or None,
            disable_ssl=not self.verify_tls,
            retry=Retry(total=0, connect=0, read=0, status=0, backoff_factor=0),
            timeout=self.query_timeout_s,  # requests takes a float
        )

    def _unreachable(self, exc: BaseException) -> str:
        if isinstance(exc, PrometheusUnavailable):
            return str(exc)
        if isinstance(exc, requests.ConnectionError | requests.Timeout):
            reason = type(exc).__name__
            inner = str(exc)
            if "Connection refused" in inner:
                reason = "connection refused"
            elif isinstance(exc, requests.Timeout):
                reason = "timed out"
            return f"prometheus unreachable at {self.url}: {reason}"
        text = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return f"prometheus unreachable at {self.url}: {type(exc).__name__}: {text}"

    def probe(self) -> tuple[bool, str]:
        """For preflight: is Prometheus reachable and scraping a target the selector
        matches? Returns (ok, a one-line explanation)."""
        try:
            with self.connect() as prom:
                targets = scrape_times(prom, self.selectors)
        except Exception as exc:
            return False, self._unreachable(exc)
        where = f"up{_selector(self.selectors)}"
        if not targets:
            return False, f"prometheus at {self.url} scrapes no target matching {where}"
        healthy = sorted(format_labels(t) for t, (_, up) in targets.items() if up == 1)
        if not healthy:
            return False, f"prometheus at {self.url}: every target matching {where} is down"
        return True, f"prometheus at {self.url} scrapes {len(healthy)} target(s) matching {where}"

    # -- the run window -------------------------------------------------------------

    def begin_run(self) -> RunStart:
        try:
            with self.connect() as prom:
                start = RunStart(snapshot(prom, self.selectors), None)
        except Exception as exc:  # never crash a stage over a metrics source
            start = RunStart(None, self._unreachable(exc))
        with self._lock:
            self._last_start = start
        return start

    def end_run(
        self, run_finished_at: float | datetime, start: RunStart | None = None
    ) -> tuple[int | None, int | None, list[str]]:
        result = self.end_run_detail(run_finished_at, start)
        return result.persisted, result.reads, list(result.notes)

    def end_run_detail(
        self,
        run_finished_at: float | datetime,
        start: RunStart | None = None,
        *,
        intervals: float = 2.0,
    ) -> RunCounters:
        """`intervals`: how many scrape intervals past the end the end snapshot waits
        for (2 per run; a block's check takes the first scrape after its end + 1 s)."""
        if start is None:
            with self._lock:
                start = self._last_start
        finished = (
            run_finished_at.timestamp()
            if isinstance(run_finished_at, datetime)
            else float(run_finished_at)
        )
        if start is None:
            result = RunCounters(None, None, ["prometheus: end_run without begin_run"])
        elif start.snapshot is None:
            result = RunCounters(None, None, [start.note or "prometheus: no start snapshot"])
        else:
            try:
                result = self._end(start.snapshot, finished, intervals)
            except Exception as exc:  # never crash a stage over a metrics source
                result = RunCounters(None, None, [self._unreachable(exc)])
        with self._lock:
            self.last_result = result
        return result

    def _end(self, before: CounterSnapshot, finished: float, intervals: float = 2.0) -> RunCounters:
        notes: list[str] = []
        with self.connect() as prom:
            deadline = self._wait_for_scrapes(prom, finished, notes, intervals)
            after = snapshot(prom, self.selectors)
        down = sorted(format_labels(t) for t, up in after.up.items() if up != 1)
        if after.up and len(down) == len(after.up):
            # No matched target answered its last scrape: its series went stale, and
            # whatever the run counted is unknown, not 0.
            return RunCounters(
                persisted=None,
                reads=None,
                notes=[
                    "prometheus: every matched target was down at the end of the run "
                    f"(not measured): {', '.join(down)}"
                ],
                end_snapshot=after,
                deadline=deadline,
            )
        if down:
            notes.append(
                "prometheus: target(s) down at the last scrape, counters may be stale: "
                + ", ".join(down)
            )
        deltas = counter_deltas(before, after)
        return RunCounters(
            persisted=deltas["persisted"],
            reads=deltas["reads"],
            notes=notes + deltas["notes"],
            deltas=deltas,
            end_snapshot=after,
            deadline=deadline,
        )

    def prometheus_clock(self, prom: PrometheusConnect) -> tuple[float, float]:
        """Prometheus' clock now, and its skew against ours (Prometheus' minus the
        midpoint of our clock around the query): a local instant + skew is that instant
        in Prometheus' clock."""
        local_before = self._clock()
        prom_now = prometheus_time(prom)
        return prom_now, prom_now - (local_before + self._clock()) / 2

    def _wait_for_scrapes(
        self, prom: PrometheusConnect, finished: float, notes: list[str], intervals: float = 2.0
    ) -> float:
        """Block until every matched target has a scrape newer than the run's end + 2
        intervals (in Prometheus' clock); return that deadline."""
        interval = self.scrape_interval_s
        _, skew = self.prometheus_clock(prom)
        deadline = finished + skew + (intervals * interval if intervals else 1.0)
        give_up = deadline + self.max_extra_wait_s
        step = max(min(interval / 4, 1.0), 0.02)
        while True:
            targets = scrape_times(prom, self.selectors)
            prom_now = self._clock() + skew
            if not targets:
                # Nothing to watch (the selector matches no scrape target): wait by the clock.
                if prom_now >= deadline:
                    notes.append(
                        "prometheus: no `up` series matched the selector; waited two scrape "
                        "intervals by the clock instead of by scrapes"
                    )
                    return deadline
            else:
                oldest = min(ts for ts, _ in targets.values())
                if oldest >= deadline:
                    return deadline
                if prom_now >= give_up:
                    late = sorted(
                        format_labels(t) for t, (ts, _) in targets.items() if ts < deadline
                    )
                    notes.append(
                        f"prometheus: no scrape newer than the run's end + 2 intervals after "
                        f"waiting {self.max_extra_wait_s:.1f}s more for: {', '.join(late)}; "
                        "the end snapshot may miss the run's last increments"
                    )
                    return deadline
            self._sleep(step)


def sum_by_name(
    prom: PrometheusConnect, names: tuple[str, ...], selectors: str
) -> dict[str, float]:
    """Each metric of `names` summed over its matched series (0.0: no series)."""
    result = _vector(prom, _selector(f'__name__=~"{"|".join(names)}"', selectors))
    out = dict.fromkeys(names, 0.0)
    for sample in result:
        name = sample["metric"].get("__name__")
        if name in out:
            out[name] += float(sample["value"][1])
    return out


def read_sums(
    collector: PrometheusCollector, names: tuple[str, ...]
) -> tuple[dict[str, float] | None, str | None]:
    """`sum_by_name` through the collector's connection: (sums, None) or (None, why)."""
    try:
        with collector.connect() as prom:
            return sum_by_name(prom, names, collector.selectors), None
    except Exception as exc:  # never crash a stage over a metrics source
        return None, collector._unreachable(exc)
