"""The counters once per configuration block, read after the stage (no run waits).

During the stage the driver only notes each block's first start and last end (and
the runs' own counts). After the last run the stage evaluates the counters *at past
instants* in Prometheus (an instant query with `time=`) at each block's first start,
and reads their values at the end (1 s past the last run's end, as the scrape wait
did) straight from the scrape targets Prometheus matches (`collectors/targets.py`:
the same targets and series, summed the same way), so it does not wait for
Prometheus' next scrape (up to one scrape interval). When any matched target cannot
be read that way, it falls back to waiting until Prometheus has scraped every
matched target past the end and evaluating the counters there; the report says
which way was used. A block is separable from the one before it when a scrape of every target fell
between that block's last end and this block's first start (the configuration switch
in between usually gives it one); blocks that are not are judged together, as one
group, and the report says so.

Per group: the workflow counters' deltas against the sum of the runs' own counts
(a cross-check for the report, never a per-run figure), and the first-party counters
(`clerum_spillover_*_total`), which must not move: when they did, every run of the
group gets a `consistency:` problem (the stage rewrites those records).

A block's end is read from the targets Prometheus matches *now*. When the pods that
served the block's runs (their `pod` label) are no longer among them (something
replaced them after the block's last run, before its end was read), their counters
are taken from Prometheus' last scrape of them; a pod Prometheus did not scrape past
the block's last run makes the block's end a lower bound, and its line says so
instead of "differ".
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from spillover_harness.checks.consistency import FIRST_PARTY, first_party_moved
from spillover_harness.cluster.kubelet_summary import SummarySampler
from spillover_harness.collectors.memory import BlockMemory, ContainerRestarts
from spillover_harness.collectors.prometheus import (
    PERSISTED,
    READS,
    PrometheusCollector,
    _selector,
    exact_regex,
)
from spillover_harness.collectors.targets import (
    DirectRead,
    SeriesKey,
    TargetsChanging,
    read_direct,
)

COUNTERS = (PERSISTED, READS, *FIRST_PARTY)
# The end is read this long after the last run's end (the scrape wait's margin too).
END_MARGIN_S = 1.0
# How long one matched target may take to answer the direct read.
DIRECT_TIMEOUT_S = 2.0
# The series label naming the pod a target is (what Kubernetes discovery relabels to).
POD_LABEL = "pod"


@dataclass
class Block:
    """A configuration block as the driver saw it (times: seconds since the epoch)."""

    config: str
    first_start: float
    runs: list[str] = field(default_factory=list)
    last_end: float = 0.0
    persisted: int = 0
    reads: int = 0
    complete: bool = True  # every run's own counts are known
    # The counters per series at the block's end, captured before the next configuration
    # replaced the pods that held them (`capture_end`); None: not captured.
    end_series: dict[SeriesKey, float] | None = None
    end_notes: list[str] = field(default_factory=list)
    # the block's pods replaced before its end was read that Prometheus did not scrape
    # past its last run: its end values are then a lower bound
    end_unscraped: list[str] = field(default_factory=list)
    # the mcp-host pods that served its runs, and their memory over the block
    # (collectors/memory.py), read at its end like `end_series`; None: not read yet
    pods: set[str] = field(default_factory=set)
    memory: BlockMemory | None = None
    # its memory completed after the stage (BlockBook.finish_memory): Prometheus' later
    # samples where it had none by the end, and the kubelet Summary's beside them
    memory_finished: bool = False
    # memory.restarts_from pod-status: the mcp-host containers' restart counts at the
    # block's start (None: not read; the block's restarts are then not measured)
    restarts_before: dict[str, ContainerRestarts] | None = None
    # the kubelets' Summary sampled while the block runs (a finer step than Prometheus';
    # stopped when its memory is read); None: not sampled
    sampler: SummarySampler | None = None


@dataclass
class BlockChecks:
    lines: list[str] = field(default_factory=list)  # for the report
    problems: dict[str, list[str]] = field(default_factory=dict)  # run id -> consistency


def _sums_at(collector: PrometheusCollector, prom: Any, at: float) -> dict[str, float]:
    query = _selector(f'__name__=~"{"|".join(COUNTERS)}"', collector.selectors)
    out = dict.fromkeys(COUNTERS, 0.0)
    for sample in prom.custom_query(query, params={"time": f"{at:.3f}"}):
        name = sample["metric"].get("__name__")
        if name in out:
            out[name] += float(sample["value"][1])
    return out


def _oldest_scrape_at(collector: PrometheusCollector, prom: Any, at: float) -> float:
    """The oldest of the targets' latest scrapes at or before `at` (-inf: none)."""
    query = f"timestamp(up{_selector(collector.selectors)})"
    found = [float(s["value"][1]) for s in _vector_at(prom, query, at)]
    return min(found) if found else -math.inf


def _vector_at(prom: Any, query: str, at: float) -> list[dict[str, Any]]:
    result = prom.custom_query(query, params={"time": f"{at:.3f}"})
    return list(result) if isinstance(result, list) else []


def _series_at(collector: PrometheusCollector, prom: Any, at: float) -> dict[SeriesKey, float]:
    """The counters per series (name, labels as Prometheus stores them) at `at`."""
    query = _selector(f'__name__=~"{"|".join(COUNTERS)}"', collector.selectors)
    out: dict[SeriesKey, float] = {}
    for sample in prom.custom_query(query, params={"time": f"{at:.3f}"}):
        key = _series_key(sample["metric"])
        if key[0] in COUNTERS:
            out[key] = float(sample["value"][1])
    return out


def _series_key(metric: Mapping[str, str]) -> SeriesKey:
    """A sample's series: its metric name and its other labels."""
    labels = dict(metric)
    name = labels.pop("__name__", "")
    return name, frozenset(labels.items())


def _read_at_end(
    collector: PrometheusCollector,
    prom: Any,
    end: float,
    direct: bool,
    *,
    retry: bool,
    pods: Collection[str] = (),
) -> tuple[DirectRead | None, str]:
    """The matched targets read directly `END_MARGIN_S` after `end`, or None and why not
    (`direct` false: not tried). With `retry`, a read refused as `TargetsChanging` (also
    while Prometheus does not list one of `pods`, the pods that served the block) is
    tried again until `catch_up_s`; any other failure (pods the harness cannot reach)
    gives up at once: waiting changes nothing."""
    if not direct:
        return None, "the stage asked for the scrape wait"
    wait = end + END_MARGIN_S - collector._clock()
    if wait > 0:
        collector._sleep(wait)
    give_up = collector._clock() + catch_up_s(collector)
    while True:
        try:
            read = read_direct(
                prom,
                COUNTERS,
                collector.selectors,
                timeout_s=min(DIRECT_TIMEOUT_S, collector.query_timeout_s),
                pods=pods,
                pod_label=POD_LABEL,
            )
        except Exception as exc:  # any failure: the caller's scrape wait still answers
            why = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
            if not retry or not isinstance(exc, TargetsChanging):
                return None, why
            if collector._clock() >= give_up:
                return None, why
            collector._sleep(min(1.0, collector.scrape_interval_s / 2))
        else:
            return read, ""


def _end_series(
    collector: PrometheusCollector,
    prom: Any,
    block: Block,
    notes: list[str],
    direct: bool,
) -> dict[SeriesKey, float]:
    """The counters per series at a block's end: read from the matched targets
    themselves. A read refused because Prometheus' view of the targets is changing
    (`TargetsChanging`: after a switch that replaced the pods it still lists the old
    ones, down, and finds the new ones seconds late, health unknown until scraped) is
    tried again until `catch_up_s`; any other failure (pods the harness cannot reach)
    falls back at once to Prometheus after its next scrape of them."""
    read, why = _read_at_end(collector, prom, block.last_end, direct, retry=True, pods=block.pods)
    if read is not None:
        urls = ", ".join(t.scrape_url for t in read.targets)
        notes.append(f"read directly from {len(read.targets)} target(s) ({urls})")
        series = dict(read.series)
    else:
        deadline = collector._wait_for_scrapes(prom, block.last_end, notes, 0)
        notes.append(f"read from Prometheus after a scrape past its last run ({why})")
        series = _series_at(collector, prom, max(deadline, block.last_end) + 0.001)
    replaced = _pods_not_read(series, block.pods)
    if replaced:
        last, unscraped = _last_scrapes(collector, prom, replaced, block)
        series.update(last)
        block.end_unscraped = unscraped
        notes.append(
            f"the pod(s) {', '.join(replaced)} that served the block were replaced before "
            "its end was read: their counters are Prometheus' last scrape of them"
            + (
                f" (not scraped past the block's last run: {', '.join(unscraped)})"
                if unscraped
                else ""
            )
        )
    return series


def _pods_not_read(series: Mapping[SeriesKey, float], pods: set[str]) -> list[str]:
    """The block's pods absent from `series`: every one when there is no series at all
    (nothing was read); [] when series exist but none names its pod (the targets'
    labels then cannot tell which pods were read)."""
    if not series:
        return sorted(pods)
    named = {v for _, labels in series for k, v in labels if k == POD_LABEL}
    return sorted(pods - named) if named else []


def _last_scrapes(
    collector: PrometheusCollector, prom: Any, pods: list[str], block: Block
) -> tuple[dict[SeriesKey, float], list[str]]:
    """The counters of `pods` at Prometheus' last scrape of each since the block began,
    and the pods whose last successful scrape is not past the block's last run (their
    values may miss its last increments), in Prometheus' clock."""
    prom_now, skew = collector.prometheus_clock(prom)
    window = f"{max(1, math.ceil(prom_now - (block.first_start + skew)) + 1)}s"
    own = f'{POD_LABEL}=~"{exact_regex(pods)}"'
    counters = _selector(f'__name__=~"{"|".join(COUNTERS)}"', own, collector.selectors)
    out: dict[SeriesKey, float] = {}
    for sample in _vector_at(prom, f"{counters}[{window}]", prom_now):
        key, values = _series_key(sample["metric"]), sample.get("values") or []
        if key[0] in COUNTERS and values:
            out[key] = float(values[-1][1])
    scraped: dict[str, float] = {}
    for sample in _vector_at(prom, f"up{_selector(own, collector.selectors)}[{window}]", prom_now):
        pod = str(sample["metric"].get(POD_LABEL, ""))
        ups = [float(t) for t, v in sample.get("values") or [] if float(v) == 1.0]
        if ups:
            scraped[pod] = max(scraped.get(pod, -math.inf), max(ups))
    past = block.last_end + skew
    return out, [p for p in pods if scraped.get(p, -math.inf) < past]


def catch_up_s(collector: PrometheusCollector) -> float:
    """How long a block's end read waits for Prometheus to catch up with the targets:
    its discovery applies changes every 5 s (`--scrape.discovery-reload-interval`),
    then the first scrape comes within an interval; twice that, at least 15 s."""
    return max(15.0, 2 * (5.0 + collector.scrape_interval_s))


def capture_end(collector: PrometheusCollector, block: Block) -> None:
    """Capture the block's end values before the next configuration is applied: on a
    platform whose WRC replaces the mcp-host pods when the configuration changes, the
    pods that counted the block's runs (and their series) are gone after the switch,
    and a scrape may never have seen their last increments. Never raises: a failure
    leaves `end_series` None (the block is then judged from Prometheus after the stage)."""
    if not block.runs:
        return
    try:
        with collector.connect() as prom:
            block.end_series = _end_series(collector, prom, block, block.end_notes, True)
    except Exception as exc:  # never stop a stage over a metrics source
        block.end_notes.append(f"not captured at the switch ({collector._unreachable(exc)})")
        block.end_series = None


def _sums(series: Mapping[SeriesKey, float]) -> dict[str, float]:
    out = dict.fromkeys(COUNTERS, 0.0)
    for (name, _), value in series.items():
        if name in out:
            out[name] += value
    return out


def series_deltas(
    start: Mapping[SeriesKey, float], end: Mapping[SeriesKey, float]
) -> dict[str, float]:
    """Per counter, the sum over the series present at the end of (end - start), a
    series absent at the start counting from 0 (a pod started in the block) and one
    that went down counting from its restart (its end value)."""
    out = dict.fromkeys(COUNTERS, 0.0)
    for key, after in end.items():
        name = key[0]
        if name not in out:
            continue
        before = start.get(key, 0.0)
        out[name] += after - before if after >= before else after
    return out


def _end_values(
    collector: PrometheusCollector, prom: Any, end: float, notes: list[str], direct: bool
) -> dict[str, float]:
    """The counters' sums at the end of the last block: read from the matched targets
    themselves (no scrape wait), else from Prometheus after its next scrape of them."""
    read, why = _read_at_end(collector, prom, end, direct, retry=False)
    if read is not None:
        urls = ", ".join(t.scrape_url for t in read.targets)
        notes.append(
            f"the end of the last block was read directly from the {len(read.targets)} "
            f"target(s) Prometheus matches ({urls}), {END_MARGIN_S:g} s after its last "
            "run, without waiting for a scrape"
        )
        return read.sums
    deadline = collector._wait_for_scrapes(prom, end, notes, 0)
    notes.append(
        "the end of the last block was read from Prometheus after it scraped every matched "
        f"target past the last run (the targets were not read directly: {why})"
    )
    return _sums_at(collector, prom, max(deadline, end) + 0.001)


def check_blocks(
    collector: PrometheusCollector, blocks: list[Block], *, direct: bool = True
) -> BlockChecks:
    """Read the end of the last block (from the targets, else after a scrape past it),
    then judge every block (see the module doc). `direct=False`: always wait for the
    scrape. Never raises: an unreachable Prometheus gives a line saying so."""
    out = BlockChecks()
    blocks = [b for b in blocks if b.runs]
    if not blocks:
        return out
    notes: list[str] = []
    if all(b.end_series is not None for b in blocks[:-1]):
        per_series = _check_per_series(collector, blocks, direct, out)
        if per_series:
            return out
    try:
        with collector.connect() as prom:
            end = max(b.last_end for b in blocks)
            at_end = _end_values(collector, prom, end, notes, direct)
            values = [_sums_at(collector, prom, b.first_start) for b in blocks] + [at_end]
            separable = [True] + [
                _oldest_scrape_at(collector, prom, blocks[k].first_start) >= blocks[k - 1].last_end
                for k in range(1, len(blocks))
            ]
    except Exception as exc:  # never crash a stage over a metrics source
        out.lines.append(
            f"counters not read after the stage ({collector._unreachable(exc)}): the blocks' "
            "cross-check and the first-party check were not made"
        )
        return out
    groups: list[list[int]] = []
    for k in range(len(blocks)):
        if separable[k] or not groups:
            groups.append([k])
        else:
            groups[-1].append(k)
    for group in groups:
        first, last = group[0], group[-1]
        delta = _deltas(values[first], values[last + 1])
        _judge(out, [blocks[k] for k in group], delta)
    out.lines += [f"counters: {n}" for n in notes]
    return out


def _check_per_series(
    collector: PrometheusCollector, blocks: list[Block], direct: bool, out: BlockChecks
) -> bool:
    """Judge each block on its own series: its end captured at the switch (the last
    block's now); its start is the block before's end (a pod kept across the switch
    counts on from there, a pod started by it from 0), the first block's is Prometheus
    at its first run. False when Prometheus cannot be read (the caller's path then
    says so)."""
    notes: list[str] = []
    try:
        with collector.connect() as prom:
            last = blocks[-1]
            if last.end_series is None:
                last.end_series = _end_series(collector, prom, last, notes, direct)
                last.end_notes += notes
            first = _series_at(collector, prom, blocks[0].first_start)
    except Exception:
        return False
    starts = [first] + [b.end_series or {} for b in blocks[:-1]]
    for block, start in zip(blocks, starts, strict=True):
        assert block.end_series is not None
        _judge(out, [block], series_deltas(start, block.end_series))
    how = sorted({n for b in blocks for n in b.end_notes})
    out.lines.append(
        "counters: each block's end was captured before the next configuration was "
        "applied (its pods may be replaced by the switch), and judged per series: " + "; ".join(how)
    )
    return True


def _judge(out: BlockChecks, members: list[Block], delta: Mapping[str, float]) -> None:
    """The report line and the first-party problems of a group of blocks."""
    names = " + ".join(b.config for b in members)
    runs = [r for b in members for r in b.runs]
    line = f"block {names} ({len(runs)} run(s)): Prometheus persisted +{delta[PERSISTED]:g}"
    line += f", reads +{delta[READS]:g}"
    if all(b.complete for b in members):
        own_p = sum(b.persisted for b in members)
        own_r = sum(b.reads for b in members)
        agree = delta[PERSISTED] == own_p and delta[READS] == own_r
        unscraped = [p for b in members for p in b.end_unscraped]
        below = delta[PERSISTED] <= own_p and delta[READS] <= own_r
        if agree:
            verdict = "agree"
        elif unscraped and below:
            verdict = (
                f"not compared (Prometheus is a lower bound: pod(s) {', '.join(unscraped)} "
                "replaced before it scraped them past the block's last run)"
            )
        else:
            verdict = "differ (other runs overlapped?)"
        line += f"; the runs' own counts sum to persisted {own_p}, reads {own_r}: {verdict}"
    if len(members) > 1:
        line += " (no scrape between these blocks: judged together)"
    out.lines.append(line)
    moved = first_party_moved({k: delta[k] for k in FIRST_PARTY})
    if moved:
        out.lines.append(f"block {names}: " + "; ".join(moved))
        for run in runs:
            out.problems.setdefault(run, []).extend(f"{m} (block {names})" for m in moved)


def _deltas(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """after - before per counter; a counter that went down restarted: its value after."""
    return {k: (after[k] - before[k]) if after[k] >= before[k] else after[k] for k in COUNTERS}
