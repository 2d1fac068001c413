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
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spillover_harness.checks.consistency import FIRST_PARTY, first_party_moved
from spillover_harness.collectors.prometheus import (
    PERSISTED,
    READS,
    PrometheusCollector,
    _selector,
)
from spillover_harness.collectors.targets import read_direct

COUNTERS = (PERSISTED, READS, *FIRST_PARTY)
# The end is read this long after the last run's end (the scrape wait's margin too).
END_MARGIN_S = 1.0
# How long one matched target may take to answer the direct read.
DIRECT_TIMEOUT_S = 2.0


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


def _end_values(
    collector: PrometheusCollector, prom: Any, end: float, notes: list[str], direct: bool
) -> dict[str, float]:
    """The counters' sums at the end of the last block: read from the matched targets
    themselves (no scrape wait), else from Prometheus after its next scrape of them."""
    why = "the stage asked for the scrape wait"
    if direct:
        wait = end + END_MARGIN_S - collector._clock()
        if wait > 0:
            collector._sleep(wait)
        try:
            read = read_direct(
                prom,
                COUNTERS,
                collector.selectors,
                timeout_s=min(DIRECT_TIMEOUT_S, collector.query_timeout_s),
            )
        except Exception as exc:  # any failure: the scrape wait below still answers
            why = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        else:
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
        members = [blocks[k] for k in group]
        names = " + ".join(b.config for b in members)
        runs = [r for b in members for r in b.runs]
        line = f"block {names} ({len(runs)} run(s)): Prometheus persisted +{delta[PERSISTED]:g}"
        line += f", reads +{delta[READS]:g}"
        if all(b.complete for b in members):
            own_p = sum(b.persisted for b in members)
            own_r = sum(b.reads for b in members)
            agree = delta[PERSISTED] == own_p and delta[READS] == own_r
            line += f"; the runs' own counts sum to persisted {own_p}, reads {own_r}: " + (
                "agree" if agree else "differ (other runs overlapped?)"
            )
        if len(group) > 1:
            line += " (no scrape between these blocks: judged together)"
        out.lines.append(line)
        moved = first_party_moved({k: delta[k] for k in FIRST_PARTY})
        if moved:
            out.lines.append(f"block {names}: " + "; ".join(moved))
            for run in runs:
                out.problems.setdefault(run, []).extend(f"{m} (block {names})" for m in moved)
    out.lines += [f"counters: {n}" for n in notes]
    return out


def _deltas(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """after - before per counter; a counter that went down restarted: its value after."""
    return {k: (after[k] - before[k]) if after[k] >= before[k] else after[k] for k in COUNTERS}
