"""The mcp-host's memory, restarts and OOM kills over one configuration block, from
the profile's PromQL (`profile.memory`, docs/cluster-profile.md "memory").

The cluster driver calls `read_block_memory` at each block's end, before the next
configuration is applied (the switch may replace the pods whose series these are).
Each query is evaluated at the block's end over a range as long as the block (the
`working_set` query at the block's start and at its end: the leak figure), and where
it has no sample by then, one scrape interval later; its one number is the figure,
an empty answer is None ("not measured", with a note), and a Prometheus that cannot
be reached leaves every figure None: a metrics source never stops a stage.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from string import Template
from typing import Any

from spillover_harness.collectors.prometheus import PrometheusCollector, exact_regex
from spillover_harness.profile import MemoryQueries

__all__ = [
    "BlockMemory",
    "ContainerRestarts",
    "container_restarts",
    "read_block_memory",
    "render_query",
    "restarts_between",
    "single_value",
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


def read_block_memory(
    collector: PrometheusCollector,
    queries: MemoryQueries,
    *,
    namespace: str,
    pods: Sequence[str],
    container: str,
    start: float,
    end: float,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> BlockMemory:
    """The block's figures, each query evaluated at `end` over `[start, end]`. A figure
    with no sample by `end` (a short block of pods the switch made: Prometheus' first
    scrape of them came after it) is evaluated again one scrape interval later, after
    waiting for that scrape when it is still to come: the caller reads before anything
    else runs on the pods, so what it adds is the idle pods after the block. The start
    is never read later (a sample after the runs is not the start). Never raises."""
    out = BlockMemory()
    if queries.source == "none":
        out.notes.append("memory: not read (profile memory.source: none)")
        return out
    if not pods:
        out.notes.append("memory: no mcp-host pod is known to have served the block")
        return out
    interval = collector.scrape_interval_s
    # the block's pods may be new at its start: read the working set one scrape into it,
    # the first sample they can have (an instant query takes the latest sample)
    first = min(start + interval, end)

    def read(prom: Any, at: float, names: Sequence[str]) -> dict[str, float | None]:
        got: dict[str, float | None] = {}
        for name in names:
            query = getattr(queries, "working_set" if name in EDGES else name)
            text = render_query(
                query,
                namespace=namespace,
                pods=pods,
                container=container,
                window_s=at - start + interval,
            )
            when = first if name == "start_bytes" else at
            got[name] = single_value(prom.custom_query(text, params={"time": f"{when:.3f}"}))
        return got

    names = [n for n in FIGURES if getattr(queries, n) is not None]
    if queries.working_set is not None:
        names += EDGES
    later: list[str] = []
    try:
        with collector.connect() as prom:
            values = read(prom, end, names)
            missing = [n for n in names if values[n] is None and n != "start_bytes"]
            if missing:
                at = end + interval + SCRAPE_MARGIN_S
                wait = at + SCRAPE_MARGIN_S - clock()
                if wait > 0:
                    sleep(min(wait, interval + 2 * SCRAPE_MARGIN_S))
                for name, value in read(prom, at, missing).items():
                    if value is not None:
                        values[name] = value
                        later.append(name)
    except Exception as exc:  # never stop a stage over a metrics source
        out.notes.append(f"memory: not read ({collector._unreachable(exc)})")
        return out
    for name in names:
        if values[name] is None:
            out.notes.append(
                f"memory: working_set at the block's {name[:-6]} gave no single number"
                if name in EDGES
                else f"memory: {name} query gave no single number"
            )
    if later:
        out.notes.append(
            f"memory: {', '.join(later)} read one scrape interval after the block's end "
            "(Prometheus had no sample of its pods by then; the pods were idle since)"
        )

    def whole(name: str) -> int | None:
        value = values.get(name)
        return None if value is None else round(value)

    out.peak_bytes = whole("peak_working_set")
    if out.peak_bytes is not None:
        out.peak_source = f"prometheus@{interval:g}s"
    out.limit_bytes = whole("limit")
    out.restarts = whole("restarts")
    out.oom_kills = whole("oom_kills")
    out.start_bytes = whole("start_bytes")
    out.end_bytes = whole("end_bytes")
    return out


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
