"""The mcp-host's memory, restarts and OOM kills over one configuration block, from
the profile's PromQL (`profile.memory`, docs/cluster-profile.md "memory").

The cluster driver calls `read_block_memory` at each block's end, before the next
configuration is applied (the switch may replace the pods whose series these are).
Each query is evaluated at the block's end over a range as long as the block (the
`working_set` query at the block's start and at its end: the leak figure); its one
number is the figure, an empty answer is None ("not measured", with a note), and a
Prometheus that cannot be reached leaves every figure None: a metrics source never
stops a stage.

A figure with no sample by the block's end (a short block of pods the switch made,
over before their first scrape) is left `pending`, and nobody waits for that scrape
at the switch: `read_later` evaluates it on Prometheus' later samples once the stage
has moved on, at most one scrape interval after the block's end and never past the
instant something else began on its pods (`until`), so that the figure is still the
idle pods that served the block. A reader that cannot move on first (the concurrency
lane: its next point runs on the same pods at once) waits for that scrape instead
(`wait_for_later_scrape`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from string import Template
from typing import Any

from spillover_harness.collectors.prometheus import PrometheusCollector, exact_regex
from spillover_harness.profile import MemoryQueries

__all__ = [
    "BlockMemory",
    "ContainerRestarts",
    "MemoryWindow",
    "container_restarts",
    "later_instant",
    "read_block_memory",
    "read_later",
    "render_query",
    "restarts_between",
    "single_value",
    "wait_for_later_scrape",
]

FIGURES = ("peak_working_set", "limit", "restarts", "oom_kills")
# the `working_set` query's two readings: at the block's start and at its end
EDGES = ["start_bytes", "end_bytes"]
# how long after a scrape's timestamp its samples can be taken as queryable
SCRAPE_MARGIN_S = 1.0


@dataclass
class BlockMemory:
    """One block's figures (None: not measured) and what the reader should know."""

    peak_bytes: int | None = None
    limit_bytes: int | None = None
    restarts: int | None = None
    oom_kills: int | None = None
    start_bytes: int | None = None  # the working set at the block's start
    end_bytes: int | None = None  # and at its end
    # where the peak came from, at what step (`prometheus@30s`, `kubelet-summary@1s`)
    peak_source: str | None = None
    notes: list[str] = field(default_factory=list)
    # the figures (query names, `end_bytes`) Prometheus had no sample of by the block's
    # end, for `read_later`; never the start (a sample after the runs is not the start)
    pending: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class MemoryWindow:
    """What a block's queries are about: the mcp-host pods that served it, their
    namespace and container, and the block's first start and last end (epoch s)."""

    namespace: str
    pods: tuple[str, ...]
    container: str
    start: float
    end: float


def render_query(
    query: str, *, namespace: str, pods: Sequence[str], container: str, window_s: float
) -> str:
    """The query with its placeholders filled in; `$pods` is an anchored-by-PromQL regex
    matching exactly these pod names."""
    regex = exact_regex(pods)
    window = f"{max(1, math.ceil(window_s))}s"
    return Template(query).substitute(
        namespace=namespace, pods=regex, container=container, window=window
    )


def single_value(result: Any) -> float | None:
    """The number of a query's answer: a scalar, or a vector of exactly one sample.
    None when empty or not a single finite number."""
    value: Any = result
    scalar = isinstance(result, list) and len(result) == 2 and not isinstance(result[0], dict)
    if isinstance(result, list) and not scalar:  # a vector
        if len(result) != 1:
            return None
        sample = result[0]
        value = sample.get("value") if isinstance(sample, dict) else None
    if isinstance(value, list | tuple) and len(value) == 2:
        value = value[1]
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _evaluate(
    prom: Any,
    queries: MemoryQueries,
    window: MemoryWindow,
    interval: float,
    names: Sequence[str],
    at: float,
) -> dict[str, float | None]:
    """Each named figure evaluated at `at` over the block so far (the start one scrape
    into the block: its pods may be new, and an instant query takes the latest sample)."""
    first = min(window.start + interval, window.end)
    got: dict[str, float | None] = {}
    for name in names:
        query = getattr(queries, "working_set" if name in EDGES else name)
        text = render_query(
            query,
            namespace=window.namespace,
            pods=window.pods,
            container=window.container,
            window_s=at - window.start + interval,
        )
        when = first if name == "start_bytes" else at
        got[name] = single_value(prom.custom_query(text, params={"time": f"{when:.3f}"}))
    return got


def _set(out: BlockMemory, values: Mapping[str, float | None], interval: float) -> None:
    """The figures in `values` (whole bytes or counts) on `out`; `peak_source` with the peak."""
    fields = {"peak_working_set": "peak_bytes", "limit": "limit_bytes"}
    for name, value in values.items():
        setattr(out, fields.get(name, name), None if value is None else round(value))
    if values.get("peak_working_set") is not None:
        out.peak_source = f"prometheus@{interval:g}s"


def _unmeasured(names: Iterable[str]) -> list[str]:
    """The notes of figures that gave no number: each is null, and says so."""
    return [
        f"memory: working_set at the block's {name[:-6]} gave no single number"
        if name in EDGES
        else f"memory: {name} query gave no single number"
        for name in names
    ]


def read_block_memory(
    collector: PrometheusCollector, queries: MemoryQueries, window: MemoryWindow
) -> BlockMemory:
    """The block's figures, each query evaluated at its end over the block. A figure
    with no sample by the end is left None and `pending` for `read_later`: the caller
    moves on instead of waiting up to a scrape interval for it. Never raises, never
    waits."""
    out = BlockMemory()
    if queries.source == "none":
        out.notes.append("memory: not read (profile memory.source: none)")
        return out
    if not window.pods:
        out.notes.append("memory: no mcp-host pod is known to have served the block")
        return out
    names = [n for n in FIGURES if getattr(queries, n) is not None]
    if queries.working_set is not None:
        names += EDGES
    try:
        with collector.connect() as prom:
            values = _evaluate(
                prom, queries, window, collector.scrape_interval_s, names, window.end
            )
    except Exception as exc:  # never stop a stage over a metrics source
        out.notes.append(f"memory: not read ({collector._unreachable(exc)})")
        return out
    _set(out, values, collector.scrape_interval_s)
    out.pending = [n for n in names if values[n] is None and n != "start_bytes"]
    out.notes += _unmeasured(n for n in names if values[n] is None and n not in out.pending)
    return out


def later_instant(end: float, interval: float, until: float) -> float:
    """Where the pending figures are evaluated: one scrape interval (and the margin of a
    scrape's samples) after the block's end, when Prometheus has scraped its pods since,
    or `until` when that is sooner."""
    return min(end + interval + SCRAPE_MARGIN_S, until)


def read_later(
    collector: PrometheusCollector,
    queries: MemoryQueries,
    memory: BlockMemory,
    window: MemoryWindow,
    *,
    until: float,
) -> None:
    """The figures `read_block_memory` left pending, from Prometheus' samples after the
    block's end (`later_instant`). `until`: the instant something else began on the
    block's pods (a later block they served), else now (no later instant has samples
    yet); past it a sample is not the block's. A figure still without a sample stays
    None, with a note. Never waits, never raises."""
    names, memory.pending = memory.pending, []
    if not names:
        return
    interval = collector.scrape_interval_s
    at = later_instant(window.end, interval, until)
    try:
        with collector.connect() as prom:
            values = _evaluate(prom, queries, window, interval, names, at)
    except Exception as exc:  # never stop a stage over a metrics source
        memory.notes.append(
            f"memory: {', '.join(names)} not read after the block's end "
            f"({collector._unreachable(exc)})"
        )
        return
    found = {n: v for n, v in values.items() if v is not None}
    _set(memory, found, interval)
    memory.notes += _unmeasured(n for n in names if n not in found)
    if found:
        memory.notes.append(
            f"memory: {', '.join(found)} read from Prometheus' samples after the block's "
            "end (it had none of its pods by then), at most one scrape interval later and "
            "before anything else ran on them"
        )


def wait_for_later_scrape(
    collector: PrometheusCollector,
    end: float,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """For a reader that cannot move on before reading (the concurrency lane, whose next
    point runs on the same pods at once): wait until Prometheus' samples one scrape
    interval after `end` are queryable, and return the time then, `read_later`'s `until`."""
    interval = collector.scrape_interval_s
    wait = end + interval + 2 * SCRAPE_MARGIN_S - clock()
    if wait > 0:
        sleep(min(wait, interval + 2 * SCRAPE_MARGIN_S))
    return clock()


# ---- restarts and OOM kills from the pods' own status (memory.restarts_from: pod-status)


@dataclass(frozen=True)
class ContainerRestarts:
    """A pod's mcp-host container as its status says: how often the kubelet restarted
    it, and when it last ended OOMKilled (seconds since the epoch; None: never)."""

    restarts: int
    last_oom_at: float | None = None


def _epoch(stamp: Any) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def container_restarts(
    pods: Sequence[Mapping[str, Any]], container: str
) -> dict[str, ContainerRestarts]:
    """Pod name -> its `container`'s restart count and last OOMKilled termination, from
    `status.containerStatuses` (pods without that container's status are left out)."""
    out: dict[str, ContainerRestarts] = {}
    for pod in pods:
        name = str((pod.get("metadata") or {}).get("name") or "")
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") != container:
                continue
            count = status.get("restartCount")
            last = ((status.get("lastState") or {}).get("terminated")) or {}
            oom_at = _epoch(last.get("finishedAt")) if last.get("reason") == "OOMKilled" else None
            if name and isinstance(count, int) and count >= 0:
                out[name] = ContainerRestarts(count, oom_at)
    return out


def restarts_between(
    before: Mapping[str, ContainerRestarts],
    after: Mapping[str, ContainerRestarts],
    pods: Sequence[str],
    start: float,
    end: float,
) -> tuple[int, int]:
    """(restarts, OOM kills) of the containers of `pods` between two readings: a pod not
    in `before` was created since, so it counts from 0. OOM kills are the pods that
    restarted and whose last termination, within [start, end], was OOMKilled: a lower
    bound (the status keeps only the last termination)."""
    restarts = oom_kills = 0
    for pod in pods:
        now = after.get(pod)
        if now is None:
            continue
        was = before.get(pod)
        grew = max(0, now.restarts - (was.restarts if was is not None else 0))
        restarts += grew
        if grew and now.last_oom_at is not None and start - 1 <= now.last_oom_at <= end + 1:
            oom_kills += 1
    return restarts, oom_kills
